// A workload for the tests: N goroutines that spin on the CPU (N from the first argument,
// default 2), so that a CPU limit throttles it. Exits on SIGTERM.
package main

import (
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
)

func main() {
	n := 2
	if len(os.Args) > 1 {
		if v, err := strconv.Atoi(os.Args[1]); err == nil && v > 0 {
			n = v
		}
	}
	runtime.GOMAXPROCS(n)
	for i := 0; i < n; i++ {
		go func() {
			x := 0
			for {
				x++
			}
		}()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
