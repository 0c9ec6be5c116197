// A Go gRPC client of the Platform API, as a Go user would write one: stubs
// that protoc-gen-go and protoc-gen-go-grpc generated from proto/ (imported at
// the path the protos' go_package names, with no per-file M mappings), called
// over plaintext HTTP/2 with a bearer token. test/go-client.test.ts builds and
// runs it against a real server and checks what it prints.
//
// Usage: client HOST:PORT, with the bearer token in PLATFORM_TOKEN.
// Prints one JSON object with what each call returned.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"time"

	iamv2beta1 "github.com/platform-api/platform-api/gen/go/platformapi/iam/v2beta1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// group is a Group as the test compares it.
type group struct {
	UID         string `json:"uid"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CreateTime  string `json:"createTime"`
}

// failure is a failed call's code, message and decoded status details.
type failure struct {
	Code       string            `json:"code"`
	Message    string            `json:"message"`
	Reason     string            `json:"reason,omitempty"`
	Domain     string            `json:"domain,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Violations []string          `json:"violations,omitempty"`
}

type result struct {
	StubPackage  string  `json:"stubPackage"`
	Created      group   `json:"created"`
	Child        group   `json:"child"`
	Got          group   `json:"got"`
	GetMissing   failure `json:"getMissing"`
	InvalidName  failure `json:"invalidName"`
	WithoutToken failure `json:"withoutToken"`
}

func toGroup(g *iamv2beta1.Group) group {
	return group{UID: g.GetUid(), Name: g.GetName(), Description: g.GetDescription(),
		CreateTime: g.GetCreateTime().AsTime().UTC().Format(time.RFC3339Nano)}
}

// toFailure decodes err's status and its ErrorInfo and BadRequest details
// (grpc-status-details-bin).
func toFailure(err error) failure {
	st := status.Convert(err)
	out := failure{Code: st.Code().String(), Message: st.Message()}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			out.Reason, out.Domain, out.Metadata = d.GetReason(), d.GetDomain(), d.GetMetadata()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				out.Violations = append(out.Violations, v.GetField())
			}
		}
	}
	return out
}

func run(target, token string) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, target, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	defer conn.Close()
	groups := iamv2beta1.NewGroupsServiceClient(conn)
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)

	org, err := groups.CreateGroup(authed, &iamv2beta1.CreateGroupRequest{
		Group: &iamv2beta1.Group{Name: "go org", Description: "from grpc-go"}})
	if err != nil {
		return nil, fmt.Errorf("CreateGroup: %w", err)
	}
	team, err := groups.CreateGroup(authed, &iamv2beta1.CreateGroupRequest{
		Parent: org.GetUid(), Group: &iamv2beta1.Group{Name: "go team"}})
	if err != nil {
		return nil, fmt.Errorf("CreateGroup child: %w", err)
	}
	got, err := groups.GetGroup(authed, &iamv2beta1.GetGroupRequest{Uid: team.GetUid()})
	if err != nil {
		return nil, fmt.Errorf("GetGroup: %w", err)
	}
	out := &result{
		StubPackage: reflect.TypeOf(iamv2beta1.Group{}).PkgPath(),
		Created:     toGroup(org),
		Child:       toGroup(team),
		Got:         toGroup(got),
	}
	_, err = groups.GetGroup(authed, &iamv2beta1.GetGroupRequest{Uid: org.GetUid() + "/0123456789abcdef"})
	out.GetMissing = toFailure(err)
	_, err = groups.CreateGroup(authed, &iamv2beta1.CreateGroupRequest{
		Parent: org.GetUid(), Group: &iamv2beta1.Group{Name: "Bad Name"}})
	out.InvalidName = toFailure(err)
	_, err = groups.GetGroup(ctx, &iamv2beta1.GetGroupRequest{Uid: org.GetUid()})
	out.WithoutToken = toFailure(err)
	return out, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: client HOST:PORT (token in PLATFORM_TOKEN)")
		os.Exit(2)
	}
	out, err := run(os.Args[1], os.Getenv("PLATFORM_TOKEN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
