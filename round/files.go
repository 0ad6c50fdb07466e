package round

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUnsafePath is returned when a round file or directory is a symbolic
// link, not a plain file, or resolves outside the repository. The round's
// record (journal, state, audit log, plan, baseline) is opened only as
// plain files inside the intent repository, so that nobody can point the
// server's writes at another file, or its committed record at another
// file's content, through a link.
var ErrUnsafePath = errors.New("unsafe round file")

// CheckDir refuses a round directory that is not inside root or that is
// reached through a symbolic link: every existing path element from root
// down to dir must be a real directory. Elements that do not exist yet are
// fine (they will be created as directories). root itself may be a link.
func CheckDir(root, dir string) error {
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(dir))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return fmt.Errorf("%w: %s is not inside the repository %s", ErrUnsafePath, dir, root)
	}
	p := filepath.Clean(root)
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if part == "." || part == "" {
			continue
		}
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("check %s: %w", p, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			return fmt.Errorf("%w: %s is a symbolic link (to %s); round directories must be plain directories inside the repository", ErrUnsafePath, p, target)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a directory", ErrUnsafePath, p)
		}
	}
	return nil
}

// RecordFiles are the files of a round's record that the server reads and
// writes in rounds/<id>/.
var RecordFiles = []string{JournalFile, StateFile, AuditFile, ReportFile, TimelineFile, "plan.json", "baseline.json"}

// checkRecordFiles refuses a round directory where a record file exists
// but is not a regular file (a symbolic link, a directory, a device).
func checkRecordFiles(dir string) error {
	for _, name := range RecordFiles {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return symlinkRefusal(filepath.Join(dir, name))
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file", ErrUnsafePath, filepath.Join(dir, name))
		}
	}
	return nil
}

func symlinkRefusal(path string) error {
	target, _ := os.Readlink(path)
	return fmt.Errorf("%w: %s is a symbolic link (to %s); round files are opened only as plain files inside the repository: replace it with the file itself",
		ErrUnsafePath, path, target)
}

// openFile opens dir/name without following a symbolic link at name and
// refuses anything but a regular file.
func openFile(dir, name string, flag int, perm os.FileMode) (*os.File, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, symlinkRefusal(path)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrUnsafePath, path)
	}
	return f, nil
}

// readFile reads dir/name without following a symbolic link.
func readFile(dir, name string) ([]byte, error) {
	f, err := openFile(dir, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// ReadFile reads a file of the round's record, rounds/<id>/name under the
// repository root, refusing symbolic links (ErrUnsafePath).
func ReadFile(root, dir, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := CheckDir(root, dir); err != nil {
		return nil, err
	}
	return readFile(dir, name)
}

// OpenFile opens a file of the round's record for reading, as ReadFile
// reads it (symbolic links refused), for a reader that streams it.
func OpenFile(root, dir, name string) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := CheckDir(root, dir); err != nil {
		return nil, err
	}
	return openFile(dir, name, os.O_RDONLY, 0)
}

// WriteFile replaces a file of the round's record atomically (temporary
// file, fsync, rename, fsync of the directory), refusing a directory
// reached through a symbolic link (ErrUnsafePath). The rename replaces a
// link at name with the file; it never writes through it.
func WriteFile(root, dir, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := CheckDir(root, dir); err != nil {
		return err
	}
	if fi, err := os.Lstat(filepath.Join(dir, name)); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrUnsafePath, filepath.Join(dir, name))
	}
	return writeFileAtomic(dir, name, data)
}

func checkName(name string) error {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return fmt.Errorf("%w: %q is not a file name", ErrUnsafePath, name)
	}
	return nil
}
