package engine

// Shard files of storage-only ranks (storage.go): a NumPy .npy array, or
// raw rows in a .bin file with a meta.json that names the dtype and the
// elements per row.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// readShardFile reads shard o of the variable in dir: shard-<o>.npy, or
// shard-<o>.bin with meta.json. It returns the dtype, elements per row and
// the rows' bytes.
func readShardFile(dir string, o int) (DType, int, []byte, error) {
	npy := filepath.Join(dir, fmt.Sprintf("shard-%d.npy", o))
	if b, err := os.ReadFile(npy); err == nil {
		return parseNPY(npy, b)
	}
	bin := filepath.Join(dir, fmt.Sprintf("shard-%d.bin", o))
	b, err := os.ReadFile(bin)
	if err != nil {
		return 0, 0, nil, errf(ErrInvalid, "load", "", "neither %s nor %s can be read: %v", npy, bin, err)
	}
	var meta struct {
		DType    string `json:"dtype"`
		RowElems int    `json:"row_elems"`
	}
	mb, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err == nil {
		err = json.Unmarshal(mb, &meta)
	}
	if err != nil {
		return 0, 0, nil, errf(ErrInvalid, "load", "", "%s needs %s: %v", bin, filepath.Join(dir, "meta.json"), err)
	}
	dt, err := ParseDType(meta.DType)
	if err != nil {
		return 0, 0, nil, err
	}
	if meta.RowElems <= 0 || len(b)%(meta.RowElems*dt.Size()) != 0 {
		return 0, 0, nil, errf(ErrDType, "load", "", "%s: %d bytes is not whole rows of %d × %s", bin, len(b), meta.RowElems, dt)
	}
	return dt, meta.RowElems, b, nil
}

// npyTypes maps NumPy dtype descriptors (little-endian or not applicable)
// onto DTypes.
var npyTypes = map[string]DType{"<i4": Int32, "<i8": Int64, "|u1": Uint8, "<f4": Float32, "<f8": Float64, "|b1": Bool, "|i1": Bytes}

// parseNPY reads a .npy file (format 1.0, 2.0 or 3.0, C order).
func parseNPY(path string, b []byte) (DType, int, []byte, error) {
	bad := func(format string, a ...any) (DType, int, []byte, error) {
		return 0, 0, nil, errf(ErrDType, "load", "", "%s: %s", path, fmt.Sprintf(format, a...))
	}
	if len(b) < 10 || !bytes.Equal(b[:6], []byte("\x93NUMPY")) {
		return bad("not a .npy file")
	}
	var hlen, start int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return bad("truncated header")
		}
		hlen, start = int(binary.LittleEndian.Uint32(b[8:12])), 12
	default:
		return bad("format version %d.%d", b[6], b[7])
	}
	if start+hlen > len(b) {
		return bad("header of %d bytes past the end", hlen)
	}
	h := string(b[start : start+hlen])
	field := func(key string) string {
		i := strings.Index(h, "'"+key+"':")
		if i < 0 {
			return ""
		}
		rest := strings.TrimSpace(h[i+len(key)+3:])
		if strings.HasPrefix(rest, "(") {
			return rest[1:strings.IndexByte(rest, ')')]
		}
		end := strings.IndexAny(rest, ",}")
		if end < 0 {
			return ""
		}
		return strings.Trim(strings.TrimSpace(rest[:end]), "'")
	}
	descr := field("descr")
	dt, ok := npyTypes[descr]
	if !ok && (strings.HasPrefix(descr, "|V") || strings.HasPrefix(descr, "|S")) {
		dt, ok = Bytes, true
	}
	if !ok {
		return bad("dtype %q (want <i4 <i8 |u1 <f4 <f8 |b1, or |V/|S bytes)", descr)
	}
	if field("fortran_order") != "False" {
		return bad("Fortran order")
	}
	var dims []int
	for _, d := range strings.Split(field("shape"), ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return bad("shape %q", field("shape"))
		}
		dims = append(dims, n)
	}
	if len(dims) == 0 {
		return bad("a 0-d array has no rows")
	}
	elems := 1
	for _, d := range dims[1:] {
		elems *= d
	}
	if dt == Bytes && descr != "|i1" {
		n, _ := strconv.Atoi(descr[2:])
		elems *= n
	}
	data := b[start+hlen:]
	if want := dims[0] * elems * dt.Size(); len(data) != want {
		return bad("%d data bytes, shape %v wants %d", len(data), dims, want)
	}
	return dt, elems, data, nil
}
