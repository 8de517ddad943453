package ctrl

// The table: every rank's blob, its node and local rank, in one buffer
// built by the root and held once per node in a memfd that the agent
// maps and hands to its local ranks (SCM_RIGHTS), so that a node holds
// one copy whatever its number of ranks.

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Table is the job's table, mapped read-only.
type Table struct {
	mem []byte
	n   int
}

const tabMagic = 0x44445442 // "DDTB"
const tabEntry = 16         // node, local, offset, length (u32 each)

// record is one rank's entry on its way up the tree.
type record struct {
	rank, node, local int
	blob              []byte
}

func appendRecord(b []byte, r record) []byte {
	for _, v := range []int{r.rank, r.node, r.local, len(r.blob)} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return append(b, r.blob...)
}

// eachRecord calls f for every record in b; it fails on a malformed one.
func eachRecord(b []byte, f func(record)) error {
	for len(b) > 0 {
		if len(b) < 16 {
			return fmt.Errorf("truncated record")
		}
		r := record{rank: int(binary.LittleEndian.Uint32(b)), node: int(binary.LittleEndian.Uint32(b[4:])),
			local: int(binary.LittleEndian.Uint32(b[8:]))}
		n := int(binary.LittleEndian.Uint32(b[12:]))
		if n > len(b)-16 {
			return fmt.Errorf("record of rank %d truncated", r.rank)
		}
		r.blob, b = b[16:16+n], b[16+n:]
		f(r)
	}
	return nil
}

// buildTable lays out the records of world ranks; missing lists the
// ranks without one.
func buildTable(world int, recs []byte) (tab []byte, missing []int, err error) {
	have := make([]record, world)
	seen := make([]bool, world)
	size := 8 + world*tabEntry
	err = eachRecord(recs, func(r record) {
		if r.rank >= 0 && r.rank < world && !seen[r.rank] {
			have[r.rank], seen[r.rank] = r, true
			size += len(r.blob)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	for r, ok := range seen {
		if !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return nil, missing, nil
	}
	tab = make([]byte, 8+world*tabEntry, size)
	binary.LittleEndian.PutUint32(tab, tabMagic)
	binary.LittleEndian.PutUint32(tab[4:], uint32(world))
	for r, rec := range have {
		e := tab[8+r*tabEntry:]
		binary.LittleEndian.PutUint32(e, uint32(rec.node))
		binary.LittleEndian.PutUint32(e[4:], uint32(rec.local))
		binary.LittleEndian.PutUint32(e[8:], uint32(len(tab)))
		binary.LittleEndian.PutUint32(e[12:], uint32(len(rec.blob)))
		tab = append(tab, rec.blob...)
	}
	return tab, nil, nil
}

// checkTable validates a table of world ranks.
func checkTable(b []byte, world int) error {
	if len(b) < 8 || binary.LittleEndian.Uint32(b) != tabMagic || int(binary.LittleEndian.Uint32(b[4:])) != world {
		return fmt.Errorf("not a table of %d ranks", world)
	}
	if len(b) < 8+world*tabEntry {
		return fmt.Errorf("table truncated")
	}
	for r := 0; r < world; r++ {
		e := b[8+r*tabEntry:]
		off, n := int(binary.LittleEndian.Uint32(e[8:])), int(binary.LittleEndian.Uint32(e[12:]))
		if off+n > len(b) || off < 8+world*tabEntry {
			return fmt.Errorf("entry of rank %d outside the table", r)
		}
	}
	return nil
}

// memfdTable writes b into a new memfd and maps it read-only.
func memfdTable(b []byte) (*Table, int, error) {
	fd, err := unix.MemfdCreate("ddstore-ctrl-table", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, err
	}
	for off := 0; off < len(b); {
		n, err := unix.Write(fd, b[off:])
		if err != nil {
			unix.Close(fd)
			return nil, -1, err
		}
		off += n
	}
	t, err := mapTable(fd, len(b))
	if err != nil {
		unix.Close(fd)
		return nil, -1, err
	}
	return t, fd, nil
}

// mapTable maps a table of size bytes from fd, read-only and shared.
func mapTable(fd, size int) (*Table, error) {
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &Table{mem: mem, n: int(binary.LittleEndian.Uint32(mem[4:]))}, nil
}

func (t *Table) entry(r int) []byte { return t.mem[8+r*tabEntry:] }

// Len is the number of ranks.
func (t *Table) Len() int { return t.n }

// Blob is rank r's blob (a view into the mapping: do not modify; valid
// until Close).
func (t *Table) Blob(r int) []byte {
	e := t.entry(r)
	off, n := binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint32(e[12:])
	return t.mem[off : off+n : off+n]
}

// Node is rank r's node.
func (t *Table) Node(r int) int { return int(binary.LittleEndian.Uint32(t.entry(r))) }

// Local is rank r's local rank on its node (0: the agent).
func (t *Table) Local(r int) int { return int(binary.LittleEndian.Uint32(t.entry(r)[4:])) }

// Bytes is the size of the mapping.
func (t *Table) Bytes() int { return len(t.mem) }

func (t *Table) close() {
	if t != nil && t.mem != nil {
		unix.Munmap(t.mem)
		t.mem = nil
	}
}
