package enforce_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Dependencies flow one way: transports (httplimit, grpclimit, the rls
// service) import the enforcement layer, which holds the stores it needs
// (the local fallback, the breaker); no transport imports a store itself.
func TestTransportsImportNoStore(t *testing.T) {
	for _, pkg := range []string{"../httplimit", "../grpclimit", "../internal/rls"} {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, pkg).Output()
		if err != nil {
			t.Skipf("go list: %v", err)
		}
		imports := strings.Fields(string(out))
		if !strings.Contains(string(out), "github.com/floodgate-rl/floodgate/enforce") {
			t.Errorf("%s does not import enforce; imports: %v", pkg, imports)
		}
		for _, dep := range imports {
			for _, store := range []string{"/memstore", "/breakerstore", "/redisstore"} {
				if strings.HasSuffix(dep, store) {
					t.Errorf("%s imports %s: stores belong to the enforcement layer or the caller", pkg, dep)
				}
			}
		}
	}
}
