package integration

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/limits"
)

// udpFill opens UDP sockets on loopback, asks each for the largest
// receive buffer the kernel allows, fills them from one sender, then
// drains them and prints how many bytes had been queued: what the
// command held pinned in kernel memory at once.
const udpFill = `python3 - <<'PY'
import socket
size = 65000
payload = b"x" * size
snd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
socks = []
for i in range(40):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    socks.append(s)
    for j in range(160):
        try:
            snd.sendto(payload, s.getsockname())
        except OSError:
            break
queued = 0
for s in socks:
    while True:
        try:
            queued += len(s.recv(size))
        except BlockingIOError:
            break
print("queued", queued)
PY`

// TestRunMemoryHoldsSocketBuffers fills UDP receive queues under
// --memory 64M: on cgroup v1, which does not charge socket buffers to
// the memory limit, the queues stop near the socket cap instead of
// pinning hundreds of MiB, and run says on stderr what v1 leaves out.
func TestRunMemoryHoldsSocketBuffers(t *testing.T) {
	e := newSandboxEnv(t)
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--memory", "64M", "--net", "none"}, script: udpFill})
	require.Equal(t, 0, code, stderr)
	m := regexp.MustCompile(`queued (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "stdout %q, stderr %q", out, stderr)
	queued, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	assert.Positive(t, queued, "loopback carries datagrams")
	// 64 MiB of buffers, counted with each datagram's overhead, hold
	// fewer payload bytes than that; the margin is for the kernel's
	// last charge past the cap.
	assert.Less(t, queued, int64(72<<20), "socket buffers pinned beyond --memory 64M")
	if limits.V1() {
		assert.Regexp(t, `cgroup v1: --memory 64M does not charge socket buffers; TCP and UDP socket buffers are capped separately at 64M`, stderr)
		assert.Contains(t, stderr, "Unix-socket and netlink queues are not charged")
	}
}
