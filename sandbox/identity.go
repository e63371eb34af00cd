package sandbox

import "fmt"

// Identity is the host user and group a session's processes run as. Inside the
// sandbox they are always uid and gid 1000 ("sandbox"); Identity is what that
// maps to on the host, and so who owns the files a session writes.
type Identity struct {
	UID, GID int
	Name     string // for messages; "" for a numeric UID:GID
}

func (i Identity) String() string {
	if i.Name != "" {
		return fmt.Sprintf("%s (%d:%d)", i.Name, i.UID, i.GID)
	}
	return fmt.Sprintf("%d:%d", i.UID, i.GID)
}
