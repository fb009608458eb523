// Package steer chooses, in the kernel, which socket of a SO_REUSEPORT group
// takes each new TCP connection.
//
// A Group is a BPF_PROG_TYPE_SK_REUSEPORT program attached to one reuseport
// group, with two maps the supervisor writes:
//
//   - sockets, a REUSEPORT_SOCKARRAY: the group's listening sockets, each at
//     a slot the caller picks (Add).
//   - table, an array of TableSize slot numbers, and one more entry, the
//     group's count of new connections: the n-th new connection goes to
//     table[n % TableSize].
//
// Steer fills the table so that each set of sockets gets its share of the
// entries, which is its share of the new connections, exact to a tenth of a
// percent; the sockets of one share take its connections in turn. Counting
// rather than hashing the connection's 4-tuple (the kernel's own choice)
// matters with few clients: 32 connections hashed over two sockets split
// 20/12 as often as 16/16, and the worker with 20 answers more slowly. A
// socket left out of the table takes no new
// connection, though it stays in the group; when it closes, the kernel
// migrates the connections queued on it (and half-open ones) to a socket
// the program selects, because the program is attached as
// BPF_SK_REUSEPORT_SELECT_OR_MIGRATE (Linux 5.14): nothing queued is reset.
// When the program selects nothing (an empty slot), the kernel falls back
// to its own hash over the group.
//
// The program is 29 instructions, assembled here and loaded with bpf(2)
// directly: github.com/cilium/ebpf did the same job but its package
// initialisation alone cost the supervisor 1 MiB of resident memory (the
// supervisor's goal is 15 MiB), for three system calls.
package steer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/baton-proxy/baton/internal/sockfd"

	"golang.org/x/sys/unix"
)

// TableSize is the number of entries of the selection table: shares are
// steered in steps of 1/TableSize.
const TableSize = 1000

// MaxSockets bounds the sockets of one group (the sockarray's size): room
// for two generations of the largest group (config.MaxSockets, 256) side
// by side, and more.
const MaxSockets = 1024

// counterKey is the table entry that counts the group's new connections.
const counterKey = TableSize

// BPF helpers the program calls (enum bpf_func_id).
const (
	fnMapLookupElem     = 1
	fnSkSelectReuseport = 82
)

// Group steers one reuseport group.
type Group struct {
	prog    int // descriptors, close-on-exec as bpf(2) makes them
	sockets int
	table   int
}

// Share is a set of sockets (slots given to Add) and the part of the new
// connections they take together, in tenths of a percent (0 to TableSize).
type Share struct {
	Slots  []int
	Permil int
}

// New loads the program and its maps. It fails where BPF cannot be used (no
// CAP_BPF, an old kernel, a seccomp filter): the caller falls back.
func New() (*Group, error) {
	sockets, err := createMap(unix.BPF_MAP_TYPE_REUSEPORT_SOCKARRAY, 4, 8, MaxSockets)
	if err != nil {
		return nil, fmt.Errorf("create sockarray map: %w", err)
	}
	table, err := createMap(unix.BPF_MAP_TYPE_ARRAY, 4, 4, TableSize+1)
	if err != nil {
		unix.Close(sockets)
		return nil, fmt.Errorf("create table map: %w", err)
	}
	prog, err := loadProgram(program(table, sockets))
	if err != nil {
		unix.Close(sockets)
		unix.Close(table)
		return nil, fmt.Errorf("load sk_reuseport program: %w", err)
	}
	return &Group{prog: prog, sockets: sockets, table: table}, nil
}

// insn is struct bpf_insn: opcode, registers (dst in the low nibble, src in
// the high one), offset, immediate.
type insn struct {
	code uint8
	regs uint8
	off  int16
	imm  int32
}

func ins(code uint8, dst, src uint8, off int16, imm int32) insn {
	return insn{code: code, regs: dst | src<<4, off: off, imm: imm}
}

// Opcodes used (include/uapi/linux/bpf_common.h, bpf.h).
const (
	opMovReg64   = 0x07 | 0xb0 | 0x08 // BPF_ALU64 | BPF_MOV | BPF_X
	opMovImm64   = 0x07 | 0xb0        // BPF_ALU64 | BPF_MOV | BPF_K
	opAddImm64   = 0x07 | 0x00        // BPF_ALU64 | BPF_ADD | BPF_K
	opModImm32   = 0x04 | 0x90        // BPF_ALU | BPF_MOD | BPF_K (unsigned)
	opLoadWord   = 0x01 | 0x60 | 0x00 // BPF_LDX | BPF_MEM | BPF_W
	opStoreWord  = 0x03 | 0x60 | 0x00 // BPF_STX | BPF_MEM | BPF_W
	opStoreImm   = 0x02 | 0x60 | 0x00 // BPF_ST | BPF_MEM | BPF_W
	opAtomicWord = 0x03 | 0xc0 | 0x00 // BPF_STX | BPF_ATOMIC | BPF_W
	atomicAddOld = 0x00 | 0x01        // imm of opAtomicWord: BPF_ADD | BPF_FETCH (Linux 5.12)
	opLoadImm64  = 0x00 | 0x00 | 0x18 // BPF_LD | BPF_IMM | BPF_DW: two instructions
	opCall       = 0x05 | 0x80        // BPF_JMP | BPF_CALL
	opJeqImm     = 0x05 | 0x10        // BPF_JMP | BPF_JEQ | BPF_K
	opExit       = 0x05 | 0x90        // BPF_JMP | BPF_EXIT
	regFP        = 10                 // the frame pointer
	skPass       = 1                  // SK_PASS: the connection is not refused
	pseudoMapFD  = unix.BPF_PSEUDO_MAP_FD
	passIndex    = 27 // the instruction "r0 = SK_PASS"
)

// program is, in C:
//
//	__u32 key = COUNTER;
//	__u32 *n = bpf_map_lookup_elem(&table, &key);
//	if (!n)
//		return SK_PASS;
//	key = __sync_fetch_and_add(n, 1) % TableSize;
//	__u32 *slot = bpf_map_lookup_elem(&table, &key);
//	if (slot)
//		bpf_sk_select_reuseport(ctx, &sockets, slot, 0);
//	return SK_PASS;
//
// A failed selection (an empty slot) leaves the choice to the kernel.
func program(table, sockets int) []insn {
	return []insn{
		ins(opMovReg64, 6, 1, 0, 0),                       // 0: r6 = ctx
		ins(opStoreImm, regFP, 0, -4, counterKey),         // 1: *(u32 *)(fp-4) = COUNTER
		ins(opMovReg64, 2, regFP, 0, 0),                   // 2: r2 = fp
		ins(opAddImm64, 2, 0, 0, -4),                      // 3: r2 -= 4: &key
		ins(opLoadImm64, 1, pseudoMapFD, 0, int32(table)), // 4: r1 = &table
		{},                                                // 5: its upper half
		ins(opCall, 0, 0, 0, fnMapLookupElem),             // 6: r0 = lookup
		ins(opJeqImm, 0, 0, passIndex-8, 0),               // 7: if !r0 goto pass
		ins(opMovImm64, 2, 0, 0, 1),                       // 8: r2 = 1
		ins(opAtomicWord, 0, 2, 0, atomicAddOld),          // 9: w2 = fetch_add(*r0, w2)
		ins(opModImm32, 2, 0, 0, TableSize),               // 10: w2 %= TableSize
		ins(opStoreWord, regFP, 2, -4, 0),                 // 11: *(u32 *)(fp-4) = w2
		ins(opMovReg64, 2, regFP, 0, 0),                   // 12: r2 = fp
		ins(opAddImm64, 2, 0, 0, -4),                      // 13: r2 -= 4: &key
		ins(opLoadImm64, 1, pseudoMapFD, 0, int32(table)), // 14: r1 = &table
		{},                                    // 15: its upper half
		ins(opCall, 0, 0, 0, fnMapLookupElem), // 16: r0 = lookup
		ins(opJeqImm, 0, 0, passIndex-18, 0),  // 17: if !r0 goto pass
		ins(opLoadWord, 2, 0, 0, 0),           // 18: r2 = *slot
		ins(opStoreWord, regFP, 2, -8, 0),     // 19: *(u32 *)(fp-8) = w2
		ins(opMovReg64, 1, 6, 0, 0),           // 20: r1 = ctx
		ins(opLoadImm64, 2, pseudoMapFD, 0, int32(sockets)), // 21: r2 = &sockets
		{},                              // 22: its upper half
		ins(opMovReg64, 3, regFP, 0, 0), // 23: r3 = fp
		ins(opAddImm64, 3, 0, 0, -8),    // 24: r3 -= 8: &slot
		ins(opMovImm64, 4, 0, 0, 0),     // 25: r4 = 0
		ins(opCall, 0, 0, 0, fnSkSelectReuseport), // 26: select
		ins(opMovImm64, 0, 0, 0, skPass),          // 27: pass: r0 = SK_PASS
		ins(opExit, 0, 0, 0, 0),                   // 28: return
	}
}

// bpf calls bpf(2) with attr, a struct of the command's union member.
func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// mapCreateAttr is bpf_attr for BPF_MAP_CREATE, up to map_name.
type mapCreateAttr struct {
	mapType    uint32
	keySize    uint32
	valueSize  uint32
	maxEntries uint32
	mapFlags   uint32
	innerMapFD uint32
	numaNode   uint32
	mapName    [16]byte
}

func createMap(typ, keySize, valueSize, maxEntries uint32) (int, error) {
	attr := mapCreateAttr{mapType: typ, keySize: keySize, valueSize: valueSize, maxEntries: maxEntries}
	copy(attr.mapName[:], "baton_steer")
	return bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
}

// progLoadAttr is bpf_attr for BPF_PROG_LOAD, up to expected_attach_type.
type progLoadAttr struct {
	progType           uint32
	insnCnt            uint32
	insns              uint64
	license            uint64
	logLevel           uint32
	logSize            uint32
	logBuf             uint64
	kernVersion        uint32
	progFlags          uint32
	progName           [16]byte
	progIfindex        uint32
	expectedAttachType uint32
}

// loadProgram loads prog as an SK_REUSEPORT program that may also pick the
// socket queued connections migrate to. When the verifier refuses it, the
// error carries the verifier's log.
func loadProgram(prog []insn) (int, error) {
	code := make([]byte, 8*len(prog))
	for i, in := range prog {
		b := code[8*i:]
		b[0], b[1] = in.code, in.regs
		binary.LittleEndian.PutUint16(b[2:], uint16(in.off))
		binary.LittleEndian.PutUint32(b[4:], uint32(in.imm))
	}
	license := []byte("Apache-2.0\x00")
	attr := progLoadAttr{
		progType:           unix.BPF_PROG_TYPE_SK_REUSEPORT,
		insnCnt:            uint32(len(prog)),
		insns:              uint64(uintptr(unsafe.Pointer(&code[0]))),
		license:            uint64(uintptr(unsafe.Pointer(&license[0]))),
		expectedAttachType: unix.BPF_SK_REUSEPORT_SELECT_OR_MIGRATE,
	}
	copy(attr.progName[:], "baton_steer")
	fd, err := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINVAL) {
		// The verifier refused it: again with its log, to say why.
		log := make([]byte, 64<<10)
		attr.logLevel, attr.logSize = 1, uint32(len(log))
		attr.logBuf = uint64(uintptr(unsafe.Pointer(&log[0])))
		if fd2, err2 := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err2 == nil {
			fd, err = fd2, nil
		} else if n := bytes.IndexByte(log, 0); n > 0 {
			err = fmt.Errorf("%w: verifier: %s", err, log[:n])
		}
		runtime.KeepAlive(log)
	}
	runtime.KeepAlive(code)
	runtime.KeepAlive(license)
	return fd, err
}

// mapElemAttr is bpf_attr for BPF_MAP_UPDATE_ELEM.
type mapElemAttr struct {
	mapFD uint32
	_     uint32
	key   uint64
	value uint64
	flags uint64
}

// update sets key to value (their bytes) in the map fd.
func update(fd int, key uint32, value []byte) error {
	k := make([]byte, 4)
	binary.NativeEndian.PutUint32(k, key)
	attr := mapElemAttr{
		mapFD: uint32(fd),
		key:   uint64(uintptr(unsafe.Pointer(&k[0]))),
		value: uint64(uintptr(unsafe.Pointer(&value[0]))),
		flags: 0, // BPF_ANY
	}
	_, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(k)
	runtime.KeepAlive(value)
	return err
}

// Attach makes g choose for the reuseport group f belongs to. It replaces
// any program the group had (one a previous supervisor attached).
func (g *Group) Attach(f *os.File) error {
	return sockfd.Control(f, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, g.prog); err != nil {
			return fmt.Errorf("attach sk_reuseport program: %w", err)
		}
		return nil
	})
}

// Add puts the listening socket f at slot of the sockarray. A socket that
// closes leaves its slot empty by itself.
func (g *Group) Add(slot int, f *os.File) error {
	if slot < 0 || slot >= MaxSockets {
		return fmt.Errorf("steer: slot %d out of range", slot)
	}
	return sockfd.Control(f, func(fd int) error {
		v := make([]byte, 8)
		binary.NativeEndian.PutUint64(v, uint64(fd))
		if err := update(g.sockets, uint32(slot), v); err != nil {
			return fmt.Errorf("add socket to slot %d: %w", slot, err)
		}
		return nil
	})
}

// Steer fills the table with shares, whose Permil must sum to TableSize;
// a share with no slots must have none. Entries are written one by one: a
// connection arriving meanwhile goes to a socket of the old table or of the
// new one, never to a socket of neither.
func (g *Group) Steer(shares ...Share) error {
	total := 0
	for _, s := range shares {
		if s.Permil < 0 || (s.Permil > 0 && len(s.Slots) == 0) {
			return fmt.Errorf("steer: share of %d‰ over %d sockets", s.Permil, len(s.Slots))
		}
		total += s.Permil
	}
	if total != TableSize {
		return fmt.Errorf("steer: shares sum to %d‰, not %d", total, TableSize)
	}
	values := make([]uint32, 0, TableSize)
	for _, s := range shares {
		for j := range s.Permil {
			values = append(values, uint32(s.Slots[j%len(s.Slots)]))
		}
	}
	// Spread each share over the hash space: entry i of the table takes
	// the i-th entry of an interleaving, so that no share owns a range of
	// hashes (harmless for a uniform hash, and clearer in a dump).
	v := make([]byte, 4)
	for i := range TableSize {
		binary.NativeEndian.PutUint32(v, values[interleave(i)])
		if err := update(g.table, uint32(i), v); err != nil {
			return fmt.Errorf("steer: write table entry %d: %w", i, err)
		}
	}
	return nil
}

// interleave maps table entry i to an index of the shares' concatenation
// through a stride coprime with TableSize: a permutation.
func interleave(i int) int { return (i * 7919) % TableSize }

// Close releases the program and the maps. A group it was attached to keeps
// the program until another replaces it or the group closes.
func (g *Group) Close() error {
	return errors.Join(unix.Close(g.prog), unix.Close(g.sockets), unix.Close(g.table))
}
