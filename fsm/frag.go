package fsm

// fragDelta is how much placing on h (the overlay local holds what the
// placement takes) would raise the fragmentation of h's free capacity,
// measured against the typical recent requests.
func (s *State) fragDelta(h *Host, r *Request, before, after *overlay) float64 {
	t := r.Claims[0].Type
	return s.hostFrag(h, t, after) - s.hostFrag(h, t, before)
}

// hostFrag is the expected free capacity of type t on host h that a
// typical request could not use (after FGD, ATC'23).
func (s *State) hostFrag(h *Host, t DeviceType, ov *overlay) float64 {
	shapes := s.shapes.typicalShapes()
	total := 0.0
	for _, ws := range shapes {
		total += ws.weight * s.unusable(h, t, &ws.shape, ov)
	}
	return total
}

// unusable is the free capacity of type t on h that shape sh could not use.
func (s *State) unusable(h *Host, t DeviceType, sh *Shape, ov *overlay) float64 {
	free := 0.0
	for _, id := range h.Devices {
		d := s.devices[id]
		if d.Type == t && d.Status == Available {
			free += s.freeScore(d, ov)
		}
	}
	if free == 0 {
		return 0
	}
	r := &Request{Claims: sh.Claims}
	fits := s.fitting(r)
	for _, f := range fits {
		if len(f) == 0 {
			return free
		}
	}
	if _, local := s.evalHost(h, r, BestFit, fits, ov); local == nil {
		return free
	}
	// The shape fits: count the devices of type t it could not use.
	frag := 0.0
	for i, cl := range sh.Claims {
		if cl.Type != t {
			continue
		}
		for _, id := range h.Devices {
			d := s.devices[id]
			if d.Type != t || d.Status != Available {
				continue
			}
			amt, whole := take(d.cls, &sh.Claims[i])
			if !containsClass(fits[i], d.cls) || !s.fits(d, amt, whole, ov) {
				frag += s.freeScore(d, ov)
			}
		}
		break
	}
	return frag
}
