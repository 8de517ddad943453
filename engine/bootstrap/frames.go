package bootstrap

import (
	"errors"
	"fmt"
)

// Encoders and strict decoders of the tcp method's collective frames
// (gather, result, reject/abort verdicts): a decoder accepts exactly the
// bytes its encoder writes, nothing short and nothing left over
// (FuzzRendezvousFrames checks the round trip).

var errTrailing = errors.New("trailing bytes after the frame's fields")

// end is the decoder's error, or errTrailing when bytes are left.
func (d *dec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w (%d)", errTrailing, len(d.b))
	}
	return d.err
}

// gatherFrame is a leaf's contribution to collective seq.
func gatherFrame(seq uint64, tag string, blob []byte) []byte {
	e := newEnc(fGather)
	e.u64(seq)
	e.str(tag)
	e.bytes(blob)
	return e.frame()
}

func parseGatherFrame(d *dec) (seq uint64, tag string, blob []byte, err error) {
	seq, tag, blob = d.u64(), d.str(), d.bytes()
	return seq, tag, blob, d.end()
}

// resultFrame is rank 0's answer to collective seq: every rank's blob.
func resultFrame(seq uint64, blobs [][]byte) []byte {
	e := newEnc(fResult)
	e.u64(seq)
	e.u32(uint32(len(blobs)))
	for _, b := range blobs {
		e.bytes(b)
	}
	return e.frame()
}

func parseResultFrame(d *dec) (seq uint64, blobs [][]byte, err error) {
	seq, n := d.u64(), d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b)/4) { // each blob has a length
		d.err = errShortFrame
	}
	if d.err != nil {
		return 0, nil, d.err
	}
	blobs = make([][]byte, n)
	for i := range blobs {
		blobs[i] = d.bytes()
	}
	return seq, blobs, d.end()
}

// verdictFrame is a reject or abort frame: the failure's kind, the ranks
// it names and its detail.
func verdictFrame(typ byte, kind error, ranks []int, detail string) []byte {
	return verdictCodeFrame(typ, kindCode(kind), ranks, detail)
}

func verdictCodeFrame(typ byte, code uint8, ranks []int, detail string) []byte {
	e := newEnc(typ)
	e.u8(code)
	e.ranks(ranks)
	e.str(detail)
	return e.frame()
}

func parseVerdictFrame(d *dec) (code uint8, ranks []int, detail string, err error) {
	code, ranks, detail = d.u8(), d.ranks(), d.str()
	return code, ranks, detail, d.end()
}
