// The cluster's own check (tests/k8s/cluster-check.sh), with no shell in the image:
//
//	/app              logs one line and waits for SIGTERM or SIGINT (kubectl logs)
//	/app echo ARGS    prints ARGS and exits (kubectl exec)
//	/app api          asks the API server who it is through the in-cluster Service address
//	                  (KUBERNETES_SERVICE_HOST), with the pod's ServiceAccount token and CA
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "echo":
			fmt.Println(strings.Join(os.Args[2:], " "))
			return
		case "api":
			if err := api(); err != nil {
				fmt.Fprintln(os.Stderr, "api:", err)
				os.Exit(1)
			}
			return
		}
		fmt.Fprintln(os.Stderr, "usage: app [echo ARGS... | api]")
		os.Exit(2)
	}
	host, _ := os.Hostname()
	fmt.Printf("hello: %s started\n", host)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	s := <-stop
	fmt.Printf("hello: %s stopping on %v\n", host, s)
}

func api() error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT not set")
	}
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %sca.crt", sa)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: nil}}
	url := "https://" + net.JoinHostPort(host, port) + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	var r struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	fmt.Printf("%s via %s\n", r.Status.UserInfo.Username, net.JoinHostPort(host, port))
	return nil
}
