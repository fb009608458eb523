package main

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// workerCredential resolves the config's user and group (names or ids)
// for the workers, or returns nil when the config names none. Running
// workers as another user needs root: refused otherwise, with the reason.
func workerCredential(userName, groupName string) (*syscall.Credential, error) {
	if userName == "" {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("user %q: workers can run as another user only when baton starts as root (it runs as uid %d); remove user and group, or start baton as root", userName, os.Geteuid())
	}
	uid, gid, err := lookupUser(userName)
	if err != nil {
		return nil, err
	}
	if groupName != "" {
		if gid, err = lookupGroup(groupName); err != nil {
			return nil, err
		}
	}
	if uid == 0 {
		return nil, fmt.Errorf("user %q is root: a worker never runs as root when a user is configured", userName)
	}
	// No supplementary groups: only the uid and gid asked for.
	return &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}, nil
}

func lookupUser(name string) (uid, gid uint32, err error) {
	var u *user.User
	if _, nerr := strconv.ParseUint(name, 10, 32); nerr == nil {
		u, err = user.LookupId(name)
		if err != nil {
			// A bare id need not be in /etc/passwd; its group is then
			// the same number, as nginx does.
			id, _ := strconv.ParseUint(name, 10, 32)
			return uint32(id), uint32(id), nil
		}
	} else if u, err = user.Lookup(name); err != nil {
		return 0, 0, fmt.Errorf("user %q: %w", name, err)
	}
	id, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: uid %q: %w", name, u.Uid, err)
	}
	g, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: gid %q: %w", name, u.Gid, err)
	}
	return uint32(id), uint32(g), nil
}

func lookupGroup(name string) (uint32, error) {
	if id, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(id), nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", name, err)
	}
	id, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("group %q: gid %q: %w", name, g.Gid, err)
	}
	return uint32(id), nil
}
