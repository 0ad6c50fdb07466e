package fleet

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// safeTools are the real programs a lab host may run besides its emulated
// commands: text and file tools that only touch what they are told to.
// Anything that changes the machine (reboot, apt, systemctl, mount, ip,
// sysctl, modprobe, grub-*) is either emulated or absent.
var safeTools = []string{
	"sh", "dash", "bash", "awk", "mawk", "gawk", "sed", "grep", "egrep", "fgrep", "cat", "tac", "head", "tail", "cut", "tr",
	"sort", "uniq", "wc", "paste", "join", "comm", "fold", "nl", "od", "xxd", "hexdump", "expr", "seq", "printf", "echo",
	"test", "[", "true", "false", "env", "printenv", "basename", "dirname", "readlink", "realpath", "pwd", "mktemp", "mkdir",
	"rmdir", "rm", "cp", "mv", "ln", "touch", "chmod", "ls", "stat", "find", "xargs", "tee", "date", "sleep", "timeout",
	"setsid", "nohup", "flock", "id", "whoami", "groups", "tar", "gzip", "gunzip", "zcat", "sha256sum", "sha1sum",
	"md5sum", "base64", "cmp", "diff", "kill", "ps", "pgrep", "nproc", "getconf", "sync", "du", "jq", "column", "iconv",
}

// makeSafeBin links the safe tools found on this machine into dir.
func makeSafeBin(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	search := []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"}
	for _, t := range safeTools {
		for _, d := range search {
			p := filepath.Join(d, t)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				if err := os.Symlink(p, filepath.Join(dir, t)); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
				break
			}
		}
	}
	return nil
}
