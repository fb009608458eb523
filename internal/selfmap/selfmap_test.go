package selfmap

import (
	"encoding/binary"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const mapsSample = `00400000-00e73000 r-xp 00000000 08:01 1234                               /opt/baton bin/baton
00e73000-01980000 r--p 00a73000 08:01 1234                               /opt/baton bin/baton
01980000-01a0d000 rw-p 01580000 08:01 1234                               /opt/baton bin/baton
01a0d000-03a54000 rw-p 00000000 00:00 0 
7f0000000000-7f0000010000 r--p 00000000 08:01 99                         /usr/lib/libc.so.6
7f0000010000-7f0000020000 r-xp 00000000 08:01 1234                       /opt/baton bin/baton
7ffd1a96b000-7ffd1a98c000 rw-p 00000000 00:00 0                          [stack]
`

// TestReadOnlyPicksTheBinarysReadOnlyMappings: the binary's mappings
// that are not writable (its data and bss are the process's own), and no
// other file's; the path may hold spaces.
func TestReadOnlyPicksTheBinarysReadOnlyMappings(t *testing.T) {
	got := readOnly([]byte(mapsSample), "/opt/baton bin/baton")
	want := []span{{0x400000, 0xe73000}, {0xe73000, 0x1980000}, {0x7f0000010000, 0x7f0000020000}}
	if !slices.Equal(got, want) {
		t.Fatalf("readOnly = %#v, want %#v", got, want)
	}
}

// TestFileRunsKeepsTheProcesssOwnPages: a page the process wrote a copy
// of (present, not a file page: RELRO after relocation) or that is
// swapped out must stay mapped, or MADV_DONTNEED would put the file's
// bytes, or zeroes, in its place; file pages and pages not present are
// released, in runs.
func TestFileRunsKeepsTheProcesssOwnPages(t *testing.T) {
	const file, own, swapped, absent = pmPresent | pmFile, pmPresent, pmSwapped, 0
	pages := []uint64{file, file, own, absent, file, swapped, own, file}
	entries := make([]byte, 8*len(pages))
	for i, p := range pages {
		binary.NativeEndian.PutUint64(entries[8*i:], p)
	}
	got := fileRuns(entries)
	want := []run{{0, 2}, {3, 5}, {7, 8}}
	if !slices.Equal(got, want) {
		t.Fatalf("fileRuns = %v, want %v", got, want)
	}
}

func rssFileKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestReleaseDropsTheBinarysPages: the test binary's file-backed resident
// pages fall, and the process runs on (its code and read-only data are
// mapped again as they are touched).
func TestReleaseDropsTheBinarysPages(t *testing.T) {
	before := rssFileKiB(t)
	n, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	t.Logf("released %d KiB of mappings; RssFile %d KiB before, %d after", n>>10, before, after)
	if n == 0 {
		t.Fatal("Release released nothing")
	}
	// What runs from here on (this test, the runtime, reading status)
	// maps its pages again, 64 KiB around each: what is dropped has to be
	// more than that.
	if before-after < 512 {
		t.Fatalf("RssFile %d KiB after Release, %d before: under 512 KiB dropped", after, before)
	}
	// Run on: code and data the runtime and this package use again.
	if got := readOnly([]byte(mapsSample), "/opt/baton bin/baton"); len(got) != 3 {
		t.Fatalf("after Release, readOnly found %d mappings, want 3", len(got))
	}
}

// BenchmarkRelease: what a handoff's end pays.
func BenchmarkRelease(b *testing.B) {
	for b.Loop() {
		if _, err := Release(); err != nil {
			b.Fatal(err)
		}
	}
}
