package wheel

import (
	"archive/zip"
	"errors"
	"fmt"
	"os"
	"time"
)

// BuiltAt returns the newest modification time among the members of the wheel at
// wheelPath: when its files were last written, as its own bytes say (an extended
// timestamp when the zip has one, else the MS-DOS time, read as UTC). It depends on
// nothing but the wheel's bytes, so the same wheel gives the same time on any host from
// any mirror; oci stamps an artifact's creation time with its newest wheel's.
func BuiltAt(wheelPath string) (time.Time, error) {
	f, err := os.Open(wheelPath)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading wheel times: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return time.Time{}, fmt.Errorf("reading wheel times: %w", err)
	}
	zr, err := zip.NewReader(f, st.Size())
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return time.Time{}, fmt.Errorf("%w: %s is not a zip archive: %v", ErrBadWheel, wheelPath, err)
	}
	var newest time.Time
	for _, zf := range zr.File {
		if m := zf.Modified.UTC(); m.After(newest) {
			newest = m
		}
	}
	return newest.Truncate(time.Second), nil
}
