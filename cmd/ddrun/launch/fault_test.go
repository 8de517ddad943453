package launch_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/cmd/ddrun/launch"
	"github.com/ddstore/ddstore/fault"
)

// From outside the package: a refused spec is fault.ErrInvalid and names
// what is wrong.
func TestSpecErrorsHaveFaultClass(t *testing.T) {
	for _, s := range []launch.Spec{{N: 0, Prog: "true"}, {N: 2}, {N: 2, Prog: "true", Env: []string{"=x"}}} {
		err := s.Validate()
		if !errors.Is(err, fault.ErrInvalid) || !errors.Is(err, launch.ErrInvalid) || !strings.HasPrefix(err.Error(), "launch: invalid spec: ") {
			t.Errorf("Validate(%+v) = %v, want fault.ErrInvalid", s, err)
		}
	}
	if err := (launch.Spec{N: 2, Prog: "true"}).Validate(); err != nil {
		t.Fatalf("a good spec: %v", err)
	}
}
