package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

type (
	// Device is a device as the API shows it.
	Device = wire.Device
	// Host is a host as the API shows it.
	Host = wire.Host
	// RegisterHostRequest is a host and its static devices.
	RegisterHostRequest = wire.RegisterHostRequest
	// HostDrain is a host's drain.
	HostDrain = wire.HostDrain
)

// DeviceFilter selects devices; empty fields select all.
type DeviceFilter struct {
	Type   DeviceType
	Pool   string
	Host   string
	Status DeviceStatus
}

// Devices lists devices, sorted by ID.
func (c *Client) Devices(ctx context.Context, f *DeviceFilter, q *QueryOptions) ([]Device, *QueryMeta, error) {
	v := url.Values{}
	if f != nil {
		setIf(v, "type", string(f.Type))
		setIf(v, "pool", f.Pool)
		setIf(v, "host", f.Host)
		setIf(v, "status", string(f.Status))
	}
	var out []Device
	meta, err := c.get(ctx, "/v1/devices", v, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Device returns one device.
func (c *Client) Device(ctx context.Context, id string, q *QueryOptions) (*Device, *QueryMeta, error) {
	var d Device
	meta, err := c.get(ctx, "/v1/devices/"+esc(id), nil, q, &d)
	if err != nil {
		return nil, nil, err
	}
	return &d, meta, nil
}

// SetDeviceStatus sets a device's administrative status: available,
// draining or unhealthy. A draining or unhealthy device keeps its
// allocations and takes no new ones.
func (c *Client) SetDeviceStatus(ctx context.Context, id string, status DeviceStatus) (*Device, *WriteMeta, error) {
	rid := NewRequestID()
	var d Device
	meta, err := c.write(ctx, http.MethodPost, "/v1/devices/"+esc(id)+"/status",
		wire.DeviceStatusRequest{Status: status, RequestID: rid}, rid, &d)
	if err != nil {
		return nil, nil, err
	}
	return &d, meta, nil
}

// Drain stops new allocations on a device; those it holds stay.
func (c *Client) Drain(ctx context.Context, id string) (*Device, *WriteMeta, error) {
	return c.SetDeviceStatus(ctx, id, Draining)
}

// Undrain makes a device available again.
func (c *Client) Undrain(ctx context.Context, id string) (*Device, *WriteMeta, error) {
	return c.SetDeviceStatus(ctx, id, Available)
}

// MarkUnhealthy takes a device out of scheduling as faulty.
func (c *Client) MarkUnhealthy(ctx context.Context, id string) (*Device, *WriteMeta, error) {
	return c.SetDeviceStatus(ctx, id, Unhealthy)
}

// Hosts lists the hosts, sorted by ID.
func (c *Client) Hosts(ctx context.Context, q *QueryOptions) ([]Host, *QueryMeta, error) {
	var out []Host
	meta, err := c.get(ctx, "/v1/hosts", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Host returns one host.
func (c *Client) Host(ctx context.Context, id string, q *QueryOptions) (*Host, *QueryMeta, error) {
	var h Host
	meta, err := c.get(ctx, "/v1/hosts/"+esc(id), nil, q, &h)
	if err != nil {
		return nil, nil, err
	}
	return &h, meta, nil
}

// RegisterHost registers a host with static devices, or replaces its
// inventory (allocations of devices gone or changed end lost).
func (c *Client) RegisterHost(ctx context.Context, id string, req RegisterHostRequest) (*Host, *WriteMeta, error) {
	req.RequestID = orNewID(req.RequestID)
	if req.Devices == nil {
		req.Devices = []DeviceSpec{}
	}
	var h Host
	meta, err := c.write(ctx, http.MethodPut, "/v1/hosts/"+esc(id), req, req.RequestID, &h)
	if err != nil {
		return nil, nil, err
	}
	return &h, meta, nil
}

// RemoveHost forgets a host and its devices; their allocations end lost.
func (c *Client) RemoveHost(ctx context.Context, id string) (*WriteMeta, error) {
	rid := NewRequestID()
	return c.write(ctx, http.MethodDelete, "/v1/hosts/"+esc(id), wire.WriteRequest{RequestID: rid}, rid, nil)
}

// DrainHost drains a host, as `nomad node drain` does: it takes no new
// work at once; its running allocations keep their devices until they are
// released, or until deadline (none when zero), when they end as drained.
func (c *Client) DrainHost(ctx context.Context, id string, deadline time.Duration) (*Host, *WriteMeta, error) {
	req := wire.HostDrainRequest{Deadline: wire.Duration(deadline), RequestID: NewRequestID()}
	var h Host
	meta, err := c.write(ctx, http.MethodPost, "/v1/hosts/"+esc(id)+"/drain", req, req.RequestID, &h)
	if err != nil {
		return nil, nil, err
	}
	return &h, meta, nil
}

// UndrainHost ends a host's drain: it takes new work again.
func (c *Client) UndrainHost(ctx context.Context, id string) (*Host, *WriteMeta, error) {
	rid := NewRequestID()
	var h Host
	meta, err := c.write(ctx, http.MethodPost, "/v1/hosts/"+esc(id)+"/undrain", wire.WriteRequest{RequestID: rid}, rid, &h)
	if err != nil {
		return nil, nil, err
	}
	return &h, meta, nil
}
