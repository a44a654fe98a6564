package wire

// KeyringRequest is the body of POST (install), PUT (use) and DELETE
// (remove) /v1/operator/keyring: a gossip encryption key in base64 (32
// bytes as `dmsc operator keygen` makes; 16 and 24 are accepted).
type KeyringRequest struct {
	Key string `json:"key"`
}

// KeyringResponse answers every /v1/operator/keyring call: the keys the
// live gossip members hold after the operation, and the members that
// failed it.
type KeyringResponse struct {
	// Members is the number of live members asked, servers and hosts.
	Members int `json:"members"`
	// Keys are the keys the members that answered hold, the most used
	// primary key first.
	Keys []KeyringKey `json:"keys"`
	// Failed lists the members that did not apply the operation, and why.
	Failed []KeyringFailure `json:"failed,omitempty"`
}

// KeyringKey is one gossip key and how many members hold it.
type KeyringKey struct {
	// Key is the key in base64.
	Key string `json:"key"`
	// Installed is how many members hold the key; Primary is how many
	// encrypt with it (its primary key).
	Installed int `json:"installed"`
	Primary   int `json:"primary"`
}

// KeyringFailure is a member that failed a keyring operation.
type KeyringFailure struct {
	Node  string `json:"node"`
	Error string `json:"error"`
}
