package fsm

import (
	"github.com/google/uuid"
)

// Precheck judges what can be judged of a command without the state: the
// shape of its IDs, namespace, request, policy, retention and status. A
// command it refuses would be refused by Apply too, so the API answers 400
// without spending a log entry on it. A nil error does not promise that
// Apply accepts the command (a device may be unknown, an allocation not
// active).
func Precheck(c Command) error {
	if err := precheck(c); err != nil {
		return err
	}
	return nil
}

func precheck(c Command) *Error {
	if ns := c.meta().Namespace; ns != "" && !ValidNamespace(ns) {
		return errf(ErrInvalid, "namespace %q is not 1 to %d letters, digits, '-' or '_'", ns, MaxNamespaceLength)
	}
	switch c := c.(type) {
	case *RegisterHost:
		return precheckHost(c)
	case *RemoveHost:
		return precheckID("host", c.HostID)
	case *SetHostStatus:
		return precheckID("host", c.HostID)
	case *DrainHost:
		if err := precheckID("host", c.HostID); err != nil {
			return err
		}
		if c.Deadline < 0 || c.Deadline > MaxDuration {
			return errf(ErrInvalid, "drain deadline %v out of [0, %v]", c.Deadline, MaxDuration)
		}
	case *SetDeviceStatus:
		if err := precheckID("device", c.DeviceID); err != nil {
			return err
		}
		if !c.Status.Valid() {
			return errf(ErrInvalid, "status %q cannot be set (use available, draining or unhealthy)", c.Status)
		}
	case *Allocate:
		if err := validateRequest(&c.Request); err != nil {
			return err
		}
		if c.AllocationID != "" && !canonicalUUID(c.AllocationID) {
			return errf(ErrInvalid, "allocation id %q is not a canonical UUID", c.AllocationID)
		}
	case *Release:
		return precheckAllocID(c.AllocationID)
	case *Cancel:
		return precheckAllocID(c.AllocationID)
	case *Renew:
		if err := precheckAllocID(c.AllocationID); err != nil {
			return err
		}
		if c.TTL < 0 || c.TTL > MaxDuration {
			return errf(ErrInvalid, "lease ttl %v out of (0, %v]", c.TTL, MaxDuration)
		}
	case *SetPolicy:
		return precheckPolicy(c)
	case *SetQuota:
		return validQuota(&c.Quota, c.Delete)
	case *SetQueueConfig:
		return precheckQueueConfig(c)
	case *SetRetention:
		r := c.Retention
		if r.MaxCount < 1 || r.MaxCount > MaxRetentionCount {
			return errf(ErrInvalid, "retention count %d out of 1..%d", r.MaxCount, MaxRetentionCount)
		}
		if r.MaxAge <= 0 {
			return errf(ErrInvalid, "retention age %v must be positive", r.MaxAge)
		}
	case *ACLPolicyUpsert:
		return checkPolicyShape(&c.Policy)
	case *ACLPolicyDelete:
		return precheckACLName("policy", c.Name)
	case *ACLTokenUpsert:
		if c.TTL < 0 {
			return errf(ErrInvalid, "negative token TTL")
		}
		return checkTokenShape(&c.Token)
	case *ACLTokenDelete:
		return precheckACLName("accessor", c.AccessorID)
	case *SetServerRemoved:
		if c.ServerID == "" || len(c.ServerID) > MaxServerIDLength {
			return errf(ErrInvalid, "server id %q is empty or longer than %d bytes", c.ServerID, MaxServerIDLength)
		}
	}
	return nil
}

func precheckID(kind, id string) *Error {
	if !ValidID(id) {
		return errf(ErrInvalid, "%s id %q is not 1 to %d letters, digits or -_.:@+=", kind, id, MaxIDLength)
	}
	return nil
}

func canonicalUUID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}

func precheckAllocID(id string) *Error {
	if !canonicalUUID(id) { // no allocation has it
		return errf(ErrNotFound, "allocation %q", id)
	}
	return nil
}

func precheckHost(c *RegisterHost) *Error {
	if err := precheckID("host", c.Host.ID); err != nil {
		return err
	}
	if len(c.Devices) > MaxDevicesPerHost {
		return errf(ErrInvalid, "host %q reports %d devices, more than %d", c.Host.ID, len(c.Devices), MaxDevicesPerHost)
	}
	seen := make(map[string]bool, len(c.Devices))
	for i := range c.Devices {
		d := &c.Devices[i]
		switch {
		case !ValidID(d.ID):
			return errf(ErrInvalid, "device %d: id %q is not 1 to %d letters, digits or -_.:@+=", i, d.ID, MaxIDLength)
		case d.Pool != "" && !ValidID(d.Pool):
			return errf(ErrInvalid, "device %q: pool %q is not a valid id", d.ID, d.Pool)
		case seen[d.ID]:
			return errf(ErrInvalid, "duplicate device id %q", d.ID)
		case !d.Type.Valid():
			return errf(ErrInvalid, "device %q has unknown type %q", d.ID, d.Type)
		case !d.Capabilities.Resources.valid():
			return errf(ErrInvalid, "device %q has a negative, infinite or NaN capability", d.ID)
		}
		if why := validTopology(d.Topology); why != "" {
			return errf(ErrInvalid, "device %q: topology: %s", d.ID, why)
		}
		seen[d.ID] = true
	}
	return nil
}

func precheckPolicy(c *SetPolicy) *Error {
	if c.Config.PreemptionGap < 0 || c.Config.PreemptionGap > MaxPriority {
		return errf(ErrInvalid, "preemption gap %d out of 0..%d", c.Config.PreemptionGap, MaxPriority)
	}
	if c.Pool != "" {
		if err := precheckID("pool", c.Pool); err != nil {
			return err
		}
		if c.Config.Policy != "" && !c.Config.Policy.Valid() {
			return errf(ErrInvalid, "unknown policy %q", c.Config.Policy)
		}
		return nil
	}
	if !c.DeviceType.Valid() {
		return errf(ErrInvalid, "unknown device type %q", c.DeviceType)
	}
	if !c.Config.Policy.Valid() {
		return errf(ErrInvalid, "unknown policy %q", c.Config.Policy)
	}
	return nil
}

func precheckACLName(kind, name string) *Error {
	if !validACLName(name) {
		return errf(ErrInvalid, "%s %q is not 1 to %d letters, digits, '-', '_' or '.'", kind, name, MaxACLNameLength)
	}
	return nil
}
