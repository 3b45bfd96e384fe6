// cadvisor-kubelet: cAdvisor 0.61 as the kubelet embeds it, serving its container series on
// /metrics, for bench/cadvisor-cost.py. Built from github.com/google/cadvisor/lib, the library
// the kubelet imports (the standalone binary's module, github.com/google/cadvisor/cmd, is not
// on the Go module proxy). The settings are the kubelet's: each container's housekeeping every
// 10 s, growing to 15 s while it is idle, its metric set, a 2-minute stats cache, the raw cgroup
// handler for /kubepods and /system.slice, and its request for the container series (by name,
// recursive, the newest).
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/google/cadvisor/lib/cache/memory"
	"github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/manager"
	"github.com/google/cadvisor/lib/metrics"
	info "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve /metrics on")
	housekeeping := flag.Duration("housekeeping", 10*time.Second, "each container's housekeeping interval (the kubelet's)")
	maxHousekeeping := flag.Duration("max-housekeeping", 15*time.Second, "the longest it grows to while a container is idle (the kubelet's)")
	flag.Parse()
	*manager.HousekeepingInterval = *housekeeping

	// The kubelet's set (pkg/kubelet/cadvisor), with pressure as its KubeletPSI gate adds.
	included := container.MetricSet{
		container.CpuUsageMetrics:     struct{}{},
		container.MemoryUsageMetrics:  struct{}{},
		container.CpuLoadMetrics:      struct{}{},
		container.DiskIOMetrics:       struct{}{},
		container.NetworkUsageMetrics: struct{}{},
		container.AppMetrics:          struct{}{},
		container.ProcessMetrics:      struct{}{},
		container.OOMMetrics:          struct{}{},
		container.PressureMetrics:     struct{}{},
	}
	dynamic := true
	m, err := manager.New(memory.New(2*time.Minute, nil), sysfs.NewRealSysFs(),
		manager.HousekeepingConfig{Interval: maxHousekeeping, AllowDynamic: &dynamic},
		included, []string{"/kubepods", "/system.slice"}, nil, "", 0)
	if err != nil {
		log.Fatalf("cadvisor manager: %v", err)
	}
	if err := m.Start(); err != nil {
		log.Fatalf("cadvisor start: %v", err)
	}
	reg := prometheus.NewRegistry()
	opts := info.RequestOptions{IdType: info.TypeName, Count: 1, Recursive: true}
	reg.MustRegister(metrics.NewPrometheusCollector(m, metrics.DefaultContainerLabels, included, clock.RealClock{}, opts))
	reg.MustRegister(metrics.NewPrometheusMachineCollector(m, included))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Printf("serving on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}
