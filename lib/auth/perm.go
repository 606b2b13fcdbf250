package auth

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// AllowSharedEnv is the environment variable that lets a secret (a token
// file, a TLS key) be readable by its group or by others: "1" accepts such
// a file with a warning. Platforms that share secrets through a group on
// purpose need it (Kubernetes secret volumes read through fsGroup);
// elsewhere such a file is refused, as ssh refuses a private key others can
// read (docs/security.md, "Files").
const AllowSharedEnv = "ROBINHOOD_ALLOW_SHARED_SECRETS"

var warned sync.Map // path -> true: one warning per file

// CheckSecretFile refuses a secret file that its group or others may read,
// unless AllowSharedEnv is "1" (then it is logged once). A path that cannot
// be stat'ed or is not a regular file (a device, a named pipe) is left to
// the reader, which names the problem.
func CheckSecretFile(path string) error {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	mode := st.Mode().Perm()
	if mode&0o077 == 0 {
		return nil
	}
	if os.Getenv(AllowSharedEnv) == "1" {
		if _, seen := warned.LoadOrStore(path, true); !seen {
			slog.Warn("a secret file is readable by group or others; accepted because "+AllowSharedEnv+"=1",
				"file", path, "mode", fmt.Sprintf("%04o", mode))
		}
		return nil
	}
	return fmt.Errorf("%s is readable by group or others (mode %04o): run chmod 600 %s (or set %s=1 where a platform "+
		"shares it through a group on purpose, with a warning)", path, mode, path, AllowSharedEnv)
}
