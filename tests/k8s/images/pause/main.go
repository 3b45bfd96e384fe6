// The pod sandbox's process (the "pause" container): waits for SIGTERM or SIGINT, and reaps
// nothing else. Built here because nothing can be pulled in the test environment.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
