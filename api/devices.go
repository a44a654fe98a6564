package api

import (
	"net/http"
	"slices"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// deviceStatuses are the statuses a device may read as.
var deviceStatuses = []fsm.DeviceStatus{fsm.Available, fsm.Draining, fsm.Unhealthy, fsm.Offline}

// GET /v1/devices
func (s *Server) listDevices(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	typ, err := typeParam(q)
	if err != nil {
		return err
	}
	status := fsm.DeviceStatus(q.Get("status"))
	if status != "" && !slices.Contains(deviceStatuses, status) {
		return badParam("status", string(status), "want available, draining, unhealthy or offline")
	}
	pool, host := q.Get("pool"), q.Get("host")
	var out []fsm.Device
	err = s.read(w, r, func(st *fsm.State) {
		out = out[:0]
		for _, d := range devicesOf(st, host) {
			if (typ == "" || d.Type == typ) && (pool == "" || d.Pool == pool) &&
				(host == "" || d.Host == host) && (status == "" || d.Status == status) {
				out = append(out, d)
			}
		}
	})
	if err != nil {
		return err
	}
	if out == nil {
		out = []fsm.Device{}
	}
	writeJSON(w, r, http.StatusOK, mapSlice(out, deviceToWire))
	return nil
}

// devicesOf lists the devices of a host, or all devices when host is
// empty, sorted by ID; a host's list does not copy the others.
func devicesOf(st *fsm.State, host string) []fsm.Device {
	if host == "" {
		return st.Devices()
	}
	h, ok := st.Host(host)
	if !ok {
		return nil
	}
	out := make([]fsm.Device, 0, len(h.Devices))
	for _, id := range h.Devices {
		if d, ok := st.Device(id); ok {
			out = append(out, d)
		}
	}
	return out
}

// GET /v1/devices/{id}
func (s *Server) getDevice(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var (
		d  fsm.Device
		ok bool
	)
	if err := s.read(w, r, func(st *fsm.State) { d, ok = st.Device(id) }); err != nil {
		return err
	}
	if !ok {
		return notFound("device", id)
	}
	writeJSON(w, r, http.StatusOK, deviceToWire(d))
	return nil
}

// setStatus applies a device status and answers the device.
func (s *Server) setStatus(w http.ResponseWriter, r *http.Request, cmd *fsm.SetDeviceStatus) error {
	return writeAndShow(s, w, r, cmd, cmd.RequestID, "device", cmd.DeviceID, (*fsm.State).Device, deviceToWire)
}

// writeAndShow applies cmd and answers what read finds of id in the state
// once the write is applied there, in its wire form; 404 (of what) when
// it is gone.
func writeAndShow[T, W any](s *Server, w http.ResponseWriter, r *http.Request, cmd fsm.Command, requestID, what, id string,
	read func(*fsm.State, string) (T, bool), toWire func(T) W) error {
	res, err := s.write(w, r, cmd, requestID)
	if err != nil {
		return err
	}
	var (
		v  T
		ok bool
	)
	if err := s.readAfter(w, r, res.Index, func(st *fsm.State) { v, ok = read(st, id) }); err != nil {
		return err
	}
	if !ok {
		return notFound(what, id)
	}
	writeJSON(w, r, http.StatusOK, toWire(v))
	return nil
}

// POST /v1/devices/{id}/status
func (s *Server) setDeviceStatus(w http.ResponseWriter, r *http.Request) error {
	cmd, err := decodeDeviceStatus(r.Body, r.PathValue("id"))
	if err != nil {
		return err
	}
	return s.setStatus(w, r, cmd)
}

// POST /v1/devices/{id}/drain
func (s *Server) drainDevice(w http.ResponseWriter, r *http.Request) error {
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	return s.setStatus(w, r, &fsm.SetDeviceStatus{Meta: fsm.Meta{RequestID: body.RequestID}, DeviceID: r.PathValue("id"), Status: fsm.Draining})
}

// POST /v1/devices/{id}/undrain
func (s *Server) undrainDevice(w http.ResponseWriter, r *http.Request) error {
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	return s.setStatus(w, r, &fsm.SetDeviceStatus{Meta: fsm.Meta{RequestID: body.RequestID}, DeviceID: r.PathValue("id"), Status: fsm.Available})
}

// POST /v1/hosts/{id}/drain
func (s *Server) drainHost(w http.ResponseWriter, r *http.Request) error {
	cmd, err := decodeHostDrain(r.Body, r.PathValue("id"))
	if err != nil {
		return err
	}
	return s.setDrain(w, r, cmd)
}

// POST /v1/hosts/{id}/undrain
func (s *Server) undrainHost(w http.ResponseWriter, r *http.Request) error {
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	return s.setDrain(w, r, &fsm.DrainHost{Meta: fsm.Meta{RequestID: body.RequestID}, HostID: r.PathValue("id")})
}

// setDrain applies a host drain and answers the host.
func (s *Server) setDrain(w http.ResponseWriter, r *http.Request, cmd *fsm.DrainHost) error {
	return writeAndShow(s, w, r, cmd, cmd.RequestID, "host", cmd.HostID, (*fsm.State).Host, hostToWire)
}

// GET /v1/hosts
func (s *Server) listHosts(w http.ResponseWriter, r *http.Request) error {
	var hosts []fsm.Host
	if err := s.read(w, r, func(st *fsm.State) { hosts = st.Hosts() }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, mapSlice(hosts, hostToWire))
	return nil
}

// GET /v1/hosts/{id}
func (s *Server) getHost(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var (
		h  fsm.Host
		ok bool
	)
	if err := s.read(w, r, func(st *fsm.State) { h, ok = st.Host(id) }); err != nil {
		return err
	}
	if !ok {
		return notFound("host", id)
	}
	writeJSON(w, r, http.StatusOK, hostToWire(h))
	return nil
}

// PUT /v1/hosts/{id}
func (s *Server) registerHost(w http.ResponseWriter, r *http.Request) error {
	cmd, err := decodeRegisterHost(r.Body, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeAndShow(s, w, r, cmd, cmd.RequestID, "host", cmd.Host.ID, (*fsm.State).Host, hostToWire)
}

// DELETE /v1/hosts/{id}
func (s *Server) removeHost(w http.ResponseWriter, r *http.Request) error {
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	res, err := s.write(w, r, &fsm.RemoveHost{HostID: r.PathValue("id")}, body.RequestID)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, wire.WriteResult{Index: res.Index, RequestID: w.Header().Get(wire.HeaderRequestID)})
	return nil
}
