package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// MarkerFile is written into a lab's directory when it starts; only a
// directory carrying it is ever removed to start a fresh lab.
const MarkerFile = ".mcp-patch-lab"

const markerText = "This directory belongs to an mcp-patch lab (mcp-patch lab up/demo); starting a new lab here removes it whole.\n"

// ErrNotLabDir is returned by Fresh for a directory that holds files but no
// lab marker: it might be anything, so nothing in it is touched.
var ErrNotLabDir = errors.New("not a lab directory")

// Fresh makes dir ready for a new lab: a missing or empty directory is used
// as it is, one carrying MarkerFile (an earlier lab) is removed whole, and
// anything else is refused with ErrNotLabDir and left untouched.
func Fresh(dir string) error {
	if dir == "" {
		return errors.New("lab: no directory given")
	}
	info, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lab directory: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("lab directory %s: %w: it is not a directory", dir, ErrNotLabDir)
	}
	empty, err := isEmptyDir(dir)
	if err != nil {
		return fmt.Errorf("lab directory: %w", err)
	}
	if empty {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(dir, MarkerFile)); err != nil {
		return fmt.Errorf("refusing to remove %s: %w (it holds files but no %s marker); give --dir a new or empty directory", dir, ErrNotLabDir, MarkerFile)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the earlier lab in %s: %w", dir, err)
	}
	return nil
}

func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}
