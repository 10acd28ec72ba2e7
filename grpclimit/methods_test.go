package grpclimit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/floodgate-rl/floodgate/grpclimit"
)

// A method name with a typo ("Unarycall" for UnaryCall, which would leave
// UnaryCall unlimited) is an error once the
// server's services are known, and a warning at the first call of the
// method it misses otherwise.
func TestMisspelledMethod(t *testing.T) {
	e := newEnv(t, envOptions{})
	misspelled := "/grpc.testing.TestService/Unarycall"
	opts := grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{
		misspelled: {Limits: []grpclimit.Limit{{Rule: rule(t, "typo", 1, time.Minute), Key: grpclimit.ClientIP(nil)}}},
		emptyCall:  {Limits: []grpclimit.Limit{{Rule: rule(t, "fine", 5, time.Minute), Key: grpclimit.ClientIP(nil)}}},
	}}
	gl, err := grpclimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, testpb.UnimplementedTestServiceServer{})
	err = gl.CheckMethods(srv.GetServiceInfo())
	if !errors.Is(err, grpclimit.ErrInvalidOptions) || !strings.Contains(err.Error(), `did you mean "`+unaryCall+`"`) || strings.Contains(err.Error(), emptyCall) {
		t.Fatalf("CheckMethods = %v; want ErrInvalidOptions naming only %s, suggesting %s", err, misspelled, unaryCall)
	}
	good, err := grpclimit.New(grpclimit.Options{Enforcer: e.enf, Methods: map[string]grpclimit.Method{emptyCall: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := good.CheckMethods(srv.GetServiceInfo()); err != nil {
		t.Fatalf("CheckMethods of known methods = %v", err)
	}

	c, _ := start(t, grpc.UnaryInterceptor(gl.UnaryServerInterceptor()))
	for range 3 {
		_, err := c.UnaryCall(withMD(), new(testpb.SimpleRequest))
		if err != nil { // nothing limits the call: the typo names another method
			t.Fatalf("UnaryCall: %v", err)
		}
	}
	if n := strings.Count(e.logs.String(), "a method is called by a name that Options.Methods spells otherwise"); n != 1 ||
		!strings.Contains(e.logs.String(), misspelled) {
		t.Fatalf("%d warnings, want one naming %s:\n%s", n, misspelled, e.logs)
	}
}
