package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/egress"
)

// The bridge of --net allow: the command's network namespace holds only
// a loopback, and this first process listens there, on
// 127.0.0.1:egress.ProxyPort, handing each connection to the egress
// proxy's unix socket on the host side. The socket is reached through a
// descriptor opened before the new root hides the daemon's files, so the
// sandbox shows no path to it, and the command (another uid, and without
// the descriptor, which is close-on-exec) can reach the proxy only
// through the bridge.

// openProxy opens the proxy's socket as an O_PATH descriptor (-1 when
// the sandbox has no proxy).
func openProxy(spec Spec) (int, error) {
	if spec.Net != NetAllow {
		return -1, nil
	}
	if spec.Proxy == "" {
		return -1, errors.New("--net allow: no egress proxy socket")
	}
	fd, err := unix.Open(spec.Proxy, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, fmt.Errorf("egress proxy socket: %w", err)
	}
	return fd, nil
}

// bridgeProxy starts listening in the sandbox's network namespace (whose
// loopback must be up) and forwards, in goroutines of this process, every
// connection to the proxy's socket behind fd.
func bridgeProxy(fd int) error {
	ln, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(egress.ProxyPort))
	if err != nil {
		return fmt.Errorf("egress bridge: %w", err)
	}
	// connect(2) follows the descriptor's /proc link to the socket.
	target := "/proc/self/fd/" + strconv.Itoa(fd)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forward(c, target)
		}
	}()
	return nil
}

// forward copies between a connection of the command and a new one to
// the proxy until both directions are done.
func forward(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("unix", target)
	if err != nil {
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, c)
		_ = up.(*net.UnixConn).CloseWrite()
	}()
	_, _ = io.Copy(c, up)
	_ = c.(*net.TCPConn).CloseWrite()
	wg.Wait()
}
