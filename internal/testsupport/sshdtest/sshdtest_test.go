package sshdtest

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// A command run as root over the test sshd must not run the machine's
// ~/.bashrc (see sshdCommand), while the machine outside keeps its file.
func TestRootStartupFileCovered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("covering root's start-up file needs root; as another user the file is the user's own")
	}
	before := map[string]int64{}
	for _, p := range machineStartupFiles() {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = fi.Size()
	}
	dir := TempDir(t, "sshdtest-self-")
	signer, _ := NewKey(t, dir, "client", "ed25519")
	srv := Start(t, Options{AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}})
	client, err := ssh.Dial("tcp", srv.Addr(), &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(srv.HostKeys[0]),
		Timeout:         30 * time.Second,
	})
	if err != nil {
		t.Fatalf("dial %s: %v", srv.Addr(), err)
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(`printf '%s|' "$0"; if [ -e ~/.bashrc ]; then wc -c < ~/.bashrc; else echo absent; fi`)
	if err != nil {
		t.Fatalf("remote command: %v: %s", err, out)
	}
	got := strings.TrimSpace(string(out))
	shell, size, _ := strings.Cut(got, "|")
	if size != "0" && size != "absent" {
		t.Errorf("root's ~/.bashrc seen through the test sshd has %s bytes (shell %s); want it covered by an empty file", size, shell)
	}
	for p, size := range before {
		if fi, err := os.Stat(p); err != nil || fi.Size() != size {
			t.Errorf("%s outside the test sshd changed (was %d bytes): %v %v", p, size, fi, err)
		}
	}
}
