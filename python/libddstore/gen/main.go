// Command gen writes the error codes of the C ABI's header
// (python/libddstore/ddstore.h, between its "error codes" markers) from
// fault.Classes, the one list of error classes. Run it with
// `go generate ./python/libddstore`; TestHeaderIsCurrent fails while the
// header is stale.
package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/ddstore/ddstore/fault"
)

const (
	begin = "\t/* error codes: written by python/libddstore/gen from fault.Classes */\n"
	end   = "\t/* end of error codes */\n"
)

// enum is the generated part of the header's first enum.
func enum() string {
	cs := append([]fault.Class(nil), fault.Classes...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Code < cs[j].Code })
	var b strings.Builder
	line := func(name string, code int, doc string) {
		fmt.Fprintf(&b, "\t%-24s /* %s */\n", fmt.Sprintf("DDS_ERR_%s = %d,", name, code), doc)
	}
	for _, c := range cs {
		line(c.Name, c.Code, c.Doc)
	}
	line("OTHER", fault.CodeOther, "anything else (no libfabric or provider, OS)")
	return b.String()
}

// rewrite replaces the generated part of header h.
func rewrite(h []byte) ([]byte, error) {
	i, j := bytes.Index(h, []byte(begin)), bytes.Index(h, []byte(end))
	if i < 0 || j < i {
		return nil, fmt.Errorf("the header has no %q ... %q markers", strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	return append(append(append([]byte(nil), h[:i+len(begin)]...), enum()...), h[j:]...), nil
}

func main() {
	path := "ddstore.h"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	h, err := os.ReadFile(path)
	if err == nil {
		if h, err = rewrite(h); err == nil {
			err = os.WriteFile(path, h, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
