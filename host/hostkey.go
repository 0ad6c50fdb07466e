package host

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	skeemaknownhosts "github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyError says a host's key was refused: either the host is not in the
// known_hosts files at all, or it is listed with other keys (reinstalled
// host, or someone in the middle). Nothing was sent to the host.
type HostKeyError struct {
	Node string
	// Host is the known_hosts name that was checked ("[10.0.0.5]:2222" for a
	// non-22 port, "10.0.0.5" for port 22).
	Host string
	// KeyType and Fingerprint describe the key the host offered
	// (Fingerprint in OpenSSH's "SHA256:..." form).
	KeyType     string
	Fingerprint string
	// Known is true when known_hosts lists the host with other keys.
	Known bool
	// Want lists the known keys for the host ("file:line type fingerprint").
	Want []string
	// Revoked is true when the offered key is marked @revoked.
	Revoked bool
	// Files are the known_hosts files consulted.
	Files []string
}

func (e *HostKeyError) Error() string {
	offered := fmt.Sprintf("%s key %s", e.KeyType, e.Fingerprint)
	files := strings.Join(e.Files, ", ")
	switch {
	case e.Revoked:
		return fmt.Sprintf("host key refused for node %s (%s): it offered %s, which is marked @revoked in %s; do not connect until the host has a new key",
			e.Node, e.Host, offered, files)
	case e.Known:
		return fmt.Sprintf("host key refused for node %s (%s): it offered %s but known_hosts lists %s; "+
			"if the host was reinstalled, confirm the new fingerprint on its console (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) "+
			"and replace its line in %s; otherwise treat this as a possible man-in-the-middle",
			e.Node, e.Host, offered, strings.Join(e.Want, "; "), files)
	default:
		return fmt.Sprintf("host key refused for node %s (%s): it offered %s and the host is not in %s; "+
			"confirm the fingerprint on the host's console (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) and add a line for %s to known_hosts",
			e.Node, e.Host, offered, files, e.Host)
	}
}

// knownHosts holds the parsed known_hosts files and re-reads them when one
// changes on disk, so a person's fix (a replaced line) takes effect at the
// next dial without a restart.
type knownHosts struct {
	files []string

	mu     sync.Mutex
	db     *skeemaknownhosts.HostKeyDB
	stamps []fileStamp
}

type fileStamp struct {
	modTime time.Time
	size    int64
}

func newKnownHosts(files []string) (*knownHosts, error) {
	if len(files) == 0 {
		return nil, errors.New("no known_hosts file given: host keys must be checked")
	}
	kh := &knownHosts{files: slices.Clone(files)}
	if _, err := kh.current(); err != nil {
		return nil, err
	}
	return kh, nil
}

func (kh *knownHosts) current() (*skeemaknownhosts.HostKeyDB, error) {
	stamps := make([]fileStamp, len(kh.files))
	for i, f := range kh.files {
		st, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("read known_hosts: %w", err)
		}
		stamps[i] = fileStamp{st.ModTime(), st.Size()}
	}
	kh.mu.Lock()
	defer kh.mu.Unlock()
	if kh.db != nil && slices.Equal(stamps, kh.stamps) {
		return kh.db, nil
	}
	db, err := skeemaknownhosts.NewDB(kh.files...)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", strings.Join(kh.files, ", "), err)
	}
	kh.db, kh.stamps = db, stamps
	return db, nil
}

// hostKeyConfig returns the callback and the host key algorithm preference
// for a target: the algorithms of the keys known_hosts holds for it come
// first, so a host with several host keys negotiates one that is known.
// The rest of the supported algorithms follow, so a host that only offers an
// unlisted key type is refused by the callback with a HostKeyError that
// names its fingerprint, not with an opaque negotiation failure.
func (kh *knownHosts) hostKeyConfig(node, knownAddr string) (ssh.HostKeyCallback, []string, error) {
	db, err := kh.current()
	if err != nil {
		return nil, nil, err
	}
	supported := ssh.SupportedAlgorithms().HostKeys
	var algos []string
	for _, a := range db.HostKeyAlgorithms(knownAddr) {
		if slices.Contains(supported, a) && !slices.Contains(algos, a) {
			algos = append(algos, a)
		}
	}
	for _, a := range supported {
		if !slices.Contains(algos, a) {
			algos = append(algos, a)
		}
	}
	inner := db.HostKeyCallback()
	files := kh.files
	callback := func(_ string, remote net.Addr, key ssh.PublicKey) error {
		err := inner(knownAddr, remote, key)
		if err == nil {
			return nil
		}
		hkErr := &HostKeyError{
			Node:        node,
			Host:        knownhosts.Normalize(knownAddr),
			KeyType:     key.Type(),
			Fingerprint: ssh.FingerprintSHA256(key),
			Files:       files,
		}
		var keyErr *knownhosts.KeyError
		var revErr *knownhosts.RevokedError
		switch {
		case errors.As(err, &keyErr):
			hkErr.Known = len(keyErr.Want) > 0
			for _, w := range keyErr.Want {
				hkErr.Want = append(hkErr.Want, fmt.Sprintf("%s:%d %s %s", w.Filename, w.Line, w.Key.Type(), ssh.FingerprintSHA256(w.Key)))
			}
		case errors.As(err, &revErr):
			hkErr.Revoked = true
		default:
			return fmt.Errorf("check host key of node %s: %w", node, err)
		}
		return hkErr
	}
	return callback, algos, nil
}
