// The sandbox process of every pod on the kind nodes TokenPilot builds (the image containerd's
// sandbox_image names): it holds the pod's namespaces open and does nothing else. As PID 1 of
// the pod it reaps the children it inherits, and it exits 0 on SIGINT or SIGTERM, which is how
// the runtime stops a sandbox.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
