// Package selfmap releases a process's mappings of its own executable's
// read-only pages once it no longer runs most of them.
//
// A Go binary's text and read-only data are mapped from the file, and a
// page fault maps not one page but the pages around it that the page
// cache holds (fault-around, 64 KiB): the supervisor, which runs a small
// part of a binary it shares with its workers, counted 14-15 MiB of it in
// its resident set after start-up, where it touches a few MiB while it
// waits. The pages are the page cache's, not the process's, and stay
// there for the workers; what Release drops is the process's page-table
// entries for them, so that its RSS says what it uses.
package selfmap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Release drops this process's mappings of the file pages of its
// executable's read-only segments, with madvise(MADV_DONTNEED): the pages
// stay in the page cache, and are mapped again on their next touch. A
// page the process holds a copy of its own (a relocated page of RELRO in
// a binary linked by the system's linker, say, which the file's page
// would replace) is left mapped: /proc/self/pagemap tells them apart. It
// returns how many bytes of address space it released.
func Release() (int, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("selfmap: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("selfmap: %w", err)
	}
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, fmt.Errorf("selfmap: %w", err)
	}
	defer pm.Close()
	page := uintptr(os.Getpagesize())
	var released int
	for _, m := range readOnly(maps, exe) {
		entries := make([]byte, 8*((m.end-m.start)/page))
		if _, err := pm.ReadAt(entries, int64(m.start/page*8)); err != nil {
			return released, fmt.Errorf("selfmap: pagemap %#x-%#x: %w", m.start, m.end, err)
		}
		for _, r := range fileRuns(entries) {
			start, n := m.start+uintptr(r.from)*page, uintptr(r.to-r.from)*page
			if _, _, e := unix.Syscall(unix.SYS_MADVISE, start, n, unix.MADV_DONTNEED); e != 0 {
				return released, fmt.Errorf("selfmap: madvise %#x+%#x: %w", start, n, e)
			}
			released += int(n)
		}
	}
	return released, nil
}

// span is one mapping's address range.
type span struct{ start, end uintptr }

// readOnly returns the mappings in maps (the text of /proc/PID/maps) of
// the file path that are not writable.
func readOnly(maps []byte, path string) []span {
	var out []span
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		line := sc.Bytes()
		fields := bytes.Fields(line)
		if len(fields) < 6 || len(fields[1]) != 4 || fields[1][1] == 'w' {
			continue
		}
		start, end, ok := bounds(fields[0])
		if ok && string(pathOf(line)) == path {
			out = append(out, span{start, end})
		}
	}
	return out
}

// bounds parses a mapping's "start-end" range, in hexadecimal.
func bounds(f []byte) (start, end uintptr, ok bool) {
	a, b, found := bytes.Cut(f, []byte("-"))
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(string(a), 16, 64)
	e, err2 := strconv.ParseUint(string(b), 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}

// pathOf returns the path of a maps line: what follows its fifth field
// (it may hold spaces).
func pathOf(line []byte) []byte {
	rest := line
	for range 5 {
		rest = bytes.TrimLeft(rest, " \t")
		i := bytes.IndexAny(rest, " \t")
		if i < 0 {
			return nil
		}
		rest = rest[i:]
	}
	return bytes.TrimSpace(rest)
}

// Bits of a pagemap entry (the kernel's Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61 // a file page, or shared anonymous
)

// run is a range of pages, [from, to), by index in a mapping.
type run struct{ from, to int }

// fileRuns returns the runs of pages, by the mapping's pagemap entries
// (8 bytes each, native order), that hold nothing of the process's own:
// a file page, or none. A private copy (present and not a file page) or
// a swapped one is kept.
func fileRuns(entries []byte) []run {
	var out []run
	n := len(entries) / 8
	own := func(i int) bool {
		e := binary.NativeEndian.Uint64(entries[8*i:])
		return e&pmSwapped != 0 || e&pmPresent != 0 && e&pmFile == 0
	}
	for i := 0; i < n; {
		if own(i) {
			i++
			continue
		}
		j := i + 1
		for j < n && !own(j) {
			j++
		}
		out = append(out, run{i, j})
		i = j
	}
	return out
}
