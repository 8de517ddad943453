package bootstrap

// The job's secret: what every control connection of the job proves it
// knows (engine/auth). Where it comes from, first match:
//
//  1. Options.Insecure or DDSTORE_INSECURE: none, with a warning;
//  2. Options.Secret;
//  3. DDSTORE_TOKEN (ddrun sets a random one per job);
//  4. pmi and dir: rank 0 makes a random one and publishes it in the
//     connect collective, through the launcher's KVS (readable only by the
//     job step's own tasks) or a 0600 file in the 0700 job directory;
//  5. tcp: the token file (Options.TokenFile, DDSTORE_TOKEN_FILE, else
//     ~/.ddstore/token): 0600, in a directory only its owner may write,
//     created with a random token on first use (shared across nodes by the
//     home file system, like an ssh or munge key).

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/fault"
)

// Secret sources (Source reports one).
const (
	SecretInsecure = "insecure"  // none: Insecure or DDSTORE_INSECURE
	SecretOption   = "option"    // Options.Secret
	SecretEnv      = "env"       // DDSTORE_TOKEN
	SecretLauncher = "launcher"  // rank 0's random one, through PMI or the directory
	SecretFile     = "tokenfile" // the token file
)

// SecretOf is the secret of the job that x belongs to: what the store's own
// connections must prove. nil when the job runs insecure or x is a
// one-rank exchanger.
func SecretOf(x Exchanger) []byte {
	if s, ok := x.(interface{ Secret() []byte }); ok {
		return s.Secret()
	}
	return nil
}

// SecretSource says where x's secret came from ("" when x has none to tell).
func SecretSource(x Exchanger) string {
	if s, ok := x.(interface{ SecretSource() string }); ok {
		return s.SecretSource()
	}
	return ""
}

// JobTokenOf is the job token x's ranks proved equal (Options.Token as
// resolved: DDSTORE_JOB_TOKEN, else the launcher's job id): not a secret,
// but the same on every rank of the job. "" when x has none to tell.
func JobTokenOf(x Exchanger) string {
	if s, ok := x.(interface{ JobToken() string }); ok {
		return s.JobToken()
	}
	return ""
}

func (c *collective) JobToken() string     { return c.jobToken }
func (c *collective) Secret() []byte       { return c.secret }
func (c *collective) SecretSource() string { return c.secretSrc }

// resolveSecret fills r.secret and r.secretSrc from steps 1–3 and 5 above
// (step 4 happens in the connect collective of pmi and dir).
func (r *resolved) resolveSecret(insecure bool, token, tokenFile string) error {
	switch {
	case r.Env.World == 1:
		return nil // no connections to authenticate
	case r.Insecure || insecure:
		r.secretSrc = SecretInsecure
		slog.Warn("ddstore: running WITHOUT a job secret (Options.Insecure or DDSTORE_INSECURE): " +
			"any process that reaches this job's rendezvous or control ports can join it")
		return nil
	case len(r.Secret) > 0:
		r.secret, r.secretSrc = r.Secret, SecretOption
	case token != "":
		r.secret, r.secretSrc = []byte(token), SecretEnv
	case r.method == "pmi" || r.method == "dir":
		r.secretSrc = SecretLauncher
		return nil
	case r.method == "tcp":
		path := r.TokenFile
		if path == "" {
			path = tokenFile
		}
		if path == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return optErr("no job secret: set DDSTORE_TOKEN, DDSTORE_TOKEN_FILE, or HOME for ~/.ddstore/token (%v)", err)
			}
			path = filepath.Join(home, ".ddstore", "token")
		}
		s, err := TokenFile(path)
		if err != nil {
			return err
		}
		r.secret, r.secretSrc = s, SecretFile
		return nil
	default:
		return nil
	}
	if len(r.secret) < auth.MinSecret {
		return optErr("job secret (%s) has %d bytes; want at least %d", r.secretSrc, len(r.secret), auth.MinSecret)
	}
	return nil
}

// newSecret is a random secret: 32 bytes, hex (64 characters).
func newSecret() []byte {
	var b [32]byte
	rand.Read(b[:])
	return []byte(hex.EncodeToString(b[:]))
}

// TokenFile reads the token in path, creating it (and its directory, 0700)
// with a random token if it does not exist. It refuses a token file that is
// not a regular file owned by this user with mode 0600 or stricter, one in
// a directory that others may write, or one shorter than auth.MinSecret.
// Processes that create it at once agree on one token (link, not rename).
func TokenFile(path string) ([]byte, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, tokenErr(path, "cannot create its directory", err)
	}
	if err := checkOwned(dir, nil, true); err != nil {
		return nil, tokenErr(path, err.Error(), nil)
	}
	for range 3 {
		b, err := readPrivate(path)
		if err == nil {
			t := strings.TrimSpace(string(b))
			if len(t) < auth.MinSecret {
				return nil, tokenErr(path, fmt.Sprintf("holds %d bytes; want at least %d (remove it to get a new one)", len(t), auth.MinSecret), nil)
			}
			return []byte(t), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, tokenErr(path, err.Error(), nil)
		}
		// First use: write a private temporary file, then link it to the
		// name; whoever links first wins, the others read theirs.
		tmp, err := os.CreateTemp(dir, ".token-*")
		if err != nil {
			return nil, tokenErr(path, "cannot create it", err)
		}
		_, werr := tmp.Write(append(newSecret(), '\n'))
		if werr == nil {
			werr = tmp.Sync()
		}
		tmp.Close()
		if werr == nil {
			werr = os.Link(tmp.Name(), path)
		}
		os.Remove(tmp.Name())
		if werr != nil && !errors.Is(werr, fs.ErrExist) {
			return nil, tokenErr(path, "cannot create it", werr)
		}
	}
	return nil, tokenErr(path, "appeared and vanished while being created", nil)
}

func tokenErr(path, detail string, err error) error {
	return &fault.Error{Op: "job secret", Kind: fault.ErrEnv, Side: fault.Local,
		Detail: fmt.Sprintf("token file %s: %s", path, detail), Err: err}
}

// readPrivate reads a regular file that this user owns and nobody else may
// read or write (no symlink followed).
func readPrivate(path string) ([]byte, error) {
	b, err := readOwnedFile(path, 4096, func(n int64) error {
		return fmt.Errorf("is %d bytes long; a token file holds one line", n)
	})
	if errors.Is(err, syscall.ELOOP) {
		return nil, errors.New("is a symbolic link; want a regular file")
	}
	return b, err
}

// readOwnedFile reads a regular file of at most max bytes that this user
// owns and nobody else may read or write (checkOwned), following no
// symlink; tooLarge(size) is the error of a larger one.
func readOwnedFile(path string, max int64, tooLarge func(size int64) error) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkOwned(path, fi, false); err != nil {
		return nil, err
	}
	if fi.Size() > max {
		return nil, tooLarge(fi.Size())
	}
	return io.ReadAll(io.LimitReader(f, max+1))
}

// checkOwned refuses path unless this user owns it and, for a directory,
// nobody else may write it, for a file, nobody else may read or write it.
// fi nil: Lstat(path).
func checkOwned(path string, fi fs.FileInfo, isDir bool) error {
	if fi == nil {
		var err error
		if fi, err = os.Lstat(path); err != nil {
			return err
		}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := fi.Mode()
	switch {
	case isDir && !mode.IsDir():
		return fmt.Errorf("%s is not a directory", path)
	case !isDir && !mode.IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	case int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to uid %d, not this user (%d)", path, st.Uid, os.Getuid())
	case isDir && mode.Perm()&0o022 != 0:
		return fmt.Errorf("directory %s has mode %#o: others may write it (chmod 700 %s)", path, mode.Perm(), path)
	case !isDir && mode.Perm()&0o077 != 0:
		return fmt.Errorf("%s has mode %#o: group or others may read it (chmod 600 %s)", path, mode.Perm(), path)
	}
	return nil
}
