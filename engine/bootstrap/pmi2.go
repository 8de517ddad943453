package bootstrap

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// PMI-2 wire protocol (Slurm's mpi/pmi2 plugin, MPICH's simple PMI-2): the
// client opens with the PMI-1 style line "cmd=init pmi_version=2
// pmi_subversion=0" and its "cmd=response_to_init" answer; from then on
// every command and reply is a 6-character, left-aligned decimal length
// followed by that many bytes of "cmd=<name>;key=value;...;". Values may
// not contain ';' (Slurm does not unescape ";;"): the blobs put here are
// base64url, and 1024 characters at most (PMI2_MAX_VALLEN).

const (
	pmi2ValMax = 1024
	pmi2KeyMax = 64
)

func (x *pmiEx) handshake2(deadline time.Time) error {
	const op = "connect"
	kv, err := x.call(op, "cmd=init pmi_version=2 pmi_subversion=0", "response_to_init", deadline)
	if err != nil {
		return x.wrap(op, err, "init")
	}
	if kv["pmi_version"] != "2" {
		return x.errf(op, fault.ErrEnv, nil, "PMI server (PMI_JOBID is set: Slurm's PMI-2) answered version %s.%s, want 2.0",
			kv["pmi_version"], kv["pmi_subversion"])
	}
	kv, err = x.call2(op, "fullinit", "fullinit-response", deadline,
		"pmijobid", x.kvs, "pmirank", strconv.Itoa(x.rank), "threaded", "FALSE")
	if err != nil {
		return x.wrap(op, err, "fullinit")
	}
	rank, err1 := strconv.Atoi(kv["rank"])
	size, err2 := strconv.Atoi(kv["size"])
	if err1 != nil || err2 != nil || rank != x.rank || size != x.world {
		return x.errf(op, fault.ErrEnv, nil, "PMI-2 server says rank %q of %q, the environment rank %d of %d", kv["rank"], kv["size"], x.rank, x.world)
	}
	x.valMax, x.keyMax = pmi2ValMax, pmi2KeyMax
	return nil
}

// call2 sends one PMI-2 command with the given key/value pairs and reads
// the reply, which must be want; a reply with rc ≠ 0 is a *pmiRC.
func (x *pmiEx) call2(op, cmd, want string, deadline time.Time, kvs ...string) (map[string]string, error) {
	if x.pending {
		return nil, x.errf(op, fault.ErrClosed, nil, "PMI stream out of sync after an earlier failure")
	}
	var b strings.Builder
	b.WriteString("cmd=" + cmd + ";")
	for i := 0; i+1 < len(kvs); i += 2 {
		if strings.ContainsRune(kvs[i+1], ';') {
			return nil, x.errf(op, fault.ErrEnv, nil, "PMI-2 value for %s contains ';'", kvs[i])
		}
		b.WriteString(kvs[i] + "=" + kvs[i+1] + ";")
	}
	x.conn.SetDeadline(deadline)
	x.pending = true
	if _, err := x.conn.Write([]byte(fmt.Sprintf("%-6d%s", b.Len(), b.String()))); err != nil {
		return nil, x.ioErr(op, err)
	}
	body, err := readPMI2(x.rd)
	if err != nil {
		return nil, x.ioErr(op, err)
	}
	x.pending = false
	kv := parsePMI2(body)
	if kv["cmd"] != want {
		return nil, x.errf(op, fault.ErrEnv, nil, "PMI-2 server answered %q to %q", body, cmd)
	}
	if rc, ok := kv["rc"]; ok && rc != "0" {
		return kv, &pmiRC{rc: rc, msg: kv["errmsg"]}
	}
	return kv, nil
}

// readPMI2 reads one length-prefixed PMI-2 message.
func readPMI2(r io.Reader) (string, error) {
	var hdr [6]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(hdr[:])))
	if err != nil || n < 0 || n > 1<<20 {
		return "", fmt.Errorf("bad PMI-2 length field %q", hdr[:])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// parsePMI2 splits "cmd=x;k=v;..." (a value may hold '=').
func parsePMI2(s string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Split(s, ";") {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
}
