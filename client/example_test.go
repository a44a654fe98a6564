package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dmsc/dmsc/client"
)

// Allocate a GPU, keep its lease alive while using it, and give it back.
func Example_allocate() {
	// A one-node cluster with GPUs g1 (80 GB) and g2 (40 GB); in real use
	// the addresses are those of the cluster's servers.
	addr, stop, err := exampleAgent()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx := context.Background()
	c, err := client.New(client.Config{Addresses: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}

	// One GPU with at least 40 GB; wait up to 30s for one to free up; the
	// allocation expires unless renewed within a minute.
	a, _, err := c.Allocate(ctx, client.AllocateRequest{Request: client.Request{
		Claims: []client.Claim{{
			Type: client.GPU, Count: 1,
			Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: 40}},
		}},
		Timeout:  client.Duration(30 * time.Second),
		LeaseTTL: client.Duration(time.Minute),
	}}, client.WaitForPlacement())
	if errors.Is(err, client.ErrNoCapacity) {
		var ae *client.APIError
		errors.As(err, &ae)
		fmt.Println("refused:", ae.WhyNot.Summary)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}

	// Renew the lease every 20s while the work runs.
	renewer, err := c.NewLeaseRenewer(ctx, a, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %s on host %s (policy %s)\n", a.Status, a.Devices[0].DeviceID, a.Host, a.Policy)

	// ... use the device ...

	released, err := renewer.Release(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(released.Status)
	// Output:
	// active: g2 on host h1 (policy BestFit)
	// released
}

// A request that cannot be placed explains itself.
func ExampleAPIError_whyNot() {
	addr, stop, err := exampleAgent()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	c, err := client.New(client.Config{Addresses: []string{addr}})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _, err = c.Allocate(context.Background(), client.AllocateRequest{Request: client.Request{
		Claims: []client.Claim{{Type: client.GPU, Count: 1, Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: 100}}}},
	}})
	var ae *client.APIError
	if errors.As(err, &ae) && errors.Is(err, client.ErrNoCapacity) {
		for _, cl := range ae.WhyNot.Claims {
			fmt.Printf("claim %d (%d x %s): %d fit\n", cl.Claim, cl.Count, cl.Type, cl.Fitting)
			for _, r := range cl.Removed {
				fmt.Printf("  %d removed: %s\n", r.Count, r.Reason)
			}
		}
	}
	// Output:
	// claim 0 (1 x GPU): 0 fit
	//   2 removed: capability memory_gb too small
}

// With ACLs on, a client sends a token (Config.Token, else DMSC_TOKEN)
// and acts in a namespace its token's policies name.
func Example_allocateWithToken() {
	// A one-node cluster with ACLs on; the operator gave team A a token
	// whose policy may write allocations in namespace team-a and read
	// devices (dmsc acl policy apply, dmsc acl token create).
	addr, teamToken, stop, err := exampleACLAgent()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx := context.Background()
	c, err := client.New(client.Config{
		Addresses: []string{addr},
		Token:     teamToken,
		Namespace: "team-a",
		Timeout:   10 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	gpu := client.Request{Claims: []client.Claim{{Type: client.GPU, Count: 1}}}

	// Another team's namespace is refused before anything is done.
	_, _, err = c.Allocate(ctx, client.AllocateRequest{Request: gpu, Namespace: "team-b"})
	fmt.Println("in team-b:", errors.Is(err, client.ErrPermissionDenied))

	a, _, err := c.Allocate(ctx, client.AllocateRequest{Request: gpu})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s in %s: %s on host %s\n", a.Status, a.Namespace, a.Devices[0].DeviceID, a.Host)

	released, _, err := c.Release(ctx, a.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(released.Status)
	// Output:
	// in team-b: true
	// active in team-a: g2 on host h1
	// released
}

// Run work with two GPUs: Run allocates (waiting up to a minute), keeps
// the lease alive while the work runs, and releases at the end, however
// the work ends; RunEnv is the environment to hand the devices to a
// process.
func ExampleClient_Run() {
	addr, stop, err := exampleAgent()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	c, err := client.New(client.Config{Addresses: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := client.AllocateRequest{Request: client.Request{
		Claims:  []client.Claim{{Type: client.GPU, Count: 2}},
		Timeout: client.Duration(time.Minute),
	}}
	a, err := c.Run(context.Background(), req, client.RunOptions{}, func(ctx context.Context, a *client.Allocation) error {
		env, _ := client.RunEnv(a, nil, "")
		fmt.Println(env[3]) // a process started here would get env
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	got, _, err := c.Allocation(context.Background(), a.ID, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(got.Status)
	// Output:
	// CUDA_VISIBLE_DEVICES=g2,g1
	// released
}
