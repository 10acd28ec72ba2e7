package httplimit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Dependencies flow one way: the transport imports the enforcement layer,
// which holds the stores it needs (the local fallback, the breaker); the
// transport imports no store itself.
func TestHTTPLayerImportsNoStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	imports := strings.Fields(string(out))
	if !strings.Contains(string(out), "github.com/floodgate-rl/floodgate/enforce") {
		t.Errorf("httplimit does not import enforce; imports: %v", imports)
	}
	for _, dep := range imports {
		for _, store := range []string{"/memstore", "/breakerstore", "/redisstore"} {
			if strings.HasSuffix(dep, store) {
				t.Errorf("httplimit imports %s: stores belong to the enforcement layer or the caller", dep)
			}
		}
	}
}
