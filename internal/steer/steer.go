// Package steer chooses, in the kernel, which socket of a SO_REUSEPORT group
// takes each new TCP connection.
//
// A Group is a BPF_PROG_TYPE_SK_REUSEPORT program attached to one reuseport
// group, with two maps the supervisor writes:
//
//   - sockets, a REUSEPORT_SOCKARRAY: the group's listening sockets, each at
//     a slot the caller picks (Add).
//   - table, an array of TableSize slot numbers: a new connection goes to
//     table[hash % TableSize], where hash is the kernel's hash of the
//     connection's 4-tuple.
//
// Steer fills the table so that each set of sockets gets its share of the
// entries, which is its share of the new connections (the hash is uniform),
// exact to a tenth of a percent. A socket left out of the table takes no new
// connection, though it stays in the group; when it closes, the kernel
// migrates the connections queued on it (and half-open ones) to a socket
// the program selects, because the program is attached as
// BPF_SK_REUSEPORT_SELECT_OR_MIGRATE (Linux 5.14): nothing queued is reset.
// When the program selects nothing (an empty slot), the kernel falls back
// to its own hash over the group.
package steer

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// TableSize is the number of entries of the selection table: shares are
// steered in steps of 1/TableSize.
const TableSize = 1000

// MaxSockets bounds the sockets of one group (the sockarray's size): room
// for two generations of the largest group (config.MaxSockets, 256) side
// by side, and more.
const MaxSockets = 1024

// hashOffset is the offset of hash in struct sk_reuseport_md
// (include/uapi/linux/bpf.h): data, data_end (8 bytes each), len,
// eth_protocol, ip_protocol, bind_inany (4 each).
const hashOffset = 32

// skPass is SK_PASS: the connection is not refused.
const skPass = 1

// Group steers one reuseport group.
type Group struct {
	prog    *ebpf.Program
	sockets *ebpf.Map
	table   *ebpf.Map
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
	sockets, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "baton_socks",
		Type:       ebpf.ReusePortSockArray,
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: MaxSockets,
	})
	if err != nil {
		return nil, fmt.Errorf("create sockarray map: %w", err)
	}
	table, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "baton_table",
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: TableSize,
	})
	if err != nil {
		sockets.Close()
		return nil, fmt.Errorf("create table map: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "baton_steer",
		Type:         ebpf.SkReuseport,
		AttachType:   ebpf.AttachSkReuseportSelectOrMigrate,
		License:      "Apache-2.0",
		Instructions: program(table.FD(), sockets.FD()),
	})
	if err != nil {
		sockets.Close()
		table.Close()
		return nil, fmt.Errorf("load sk_reuseport program: %w", err)
	}
	return &Group{prog: prog, sockets: sockets, table: table}, nil
}

// program is, in C:
//
//	__u32 key = ctx->hash % TableSize;
//	__u32 *slot = bpf_map_lookup_elem(&table, &key);
//	if (slot)
//		bpf_sk_select_reuseport(ctx, &sockets, slot, 0);
//	return SK_PASS;
//
// A failed selection (an empty slot) leaves the choice to the kernel.
func program(table, sockets int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, hashOffset, asm.Word),
		asm.Mod.Imm32(asm.R2, TableSize),
		asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, table),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R2, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R2, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, sockets),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(),
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// Attach makes g choose for the reuseport group f belongs to. It replaces
// any program the group had (one a previous supervisor attached).
func (g *Group) Attach(f *os.File) error {
	return control(f, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, g.prog.FD()); err != nil {
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
	return control(f, func(fd int) error {
		if err := g.sockets.Update(uint32(slot), uint64(fd), ebpf.UpdateAny); err != nil {
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
	spread := make([]uint32, TableSize)
	for i := range TableSize {
		spread[i] = values[interleave(i)]
	}
	for i, v := range spread {
		if err := g.table.Update(uint32(i), v, ebpf.UpdateAny); err != nil {
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
	return errors.Join(g.prog.Close(), g.sockets.Close(), g.table.Close())
}

// control runs fn on f's descriptor without changing its blocking mode.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
