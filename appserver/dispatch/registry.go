package dispatch

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/robinhoodcache/robinhood/lib/config"
	libdispatch "github.com/robinhoodcache/robinhood/lib/dispatch"
)

// Factory is a dispatch policy as registered: what it does, its
// parameters, and how to build one backend's Dispatcher.
type Factory struct {
	// Summary is one line on what the policy does (listed by
	// --list-dispatch-policies).
	Summary string
	// New builds the Dispatcher of one backend's replicas from the
	// parameters lib/dispatch decoded (dispatch.Params).
	New func(params any, rs *Replicas) (Dispatcher, error)
}

var (
	regMu    sync.RWMutex
	registry = map[string]Factory{}
)

// Register adds a policy under name; called from the init function of the
// policy's file. It panics on an empty name, a missing constructor or a
// name registered twice (programming errors).
func Register(name string, f Factory) {
	if name == "" || f.New == nil {
		panic("dispatch.Register: a policy needs a name and a New function")
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("dispatch.Register: %q is registered twice", name))
	}
	registry[name] = f
}

// Names lists the registered policies in sorted order.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func lookup(name string) (Factory, error) {
	regMu.RLock()
	f, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		return Factory{}, fmt.Errorf("policy: %s is not one of %s", config.Quote(name), strings.Join(Names(), ", "))
	}
	return f, nil
}

// Params decodes and validates a policy's parameters with lib/dispatch's
// decoding (dispatch.Params); the policy must also be one the app server
// runs (registered here).
func Params(spec config.Dispatch) (any, error) {
	if _, err := lookup(spec.Policy); err != nil {
		return nil, err
	}
	return libdispatch.Params(spec)
}

// Build returns the Dispatcher of spec's policy over rs, with its
// parameters validated by Params.
func Build(spec config.Dispatch, rs *Replicas) (Dispatcher, error) {
	p, err := Params(spec)
	if err != nil {
		return nil, err
	}
	f, _ := lookup(spec.Policy)
	return f.New(p, rs)
}

// Describe lists the policies the app server runs, as lib/dispatch
// describes them (parameters, defaults, summaries).
func Describe() []libdispatch.Description {
	var out []libdispatch.Description
	for _, d := range libdispatch.Describe() {
		if _, err := lookup(d.Name); err == nil {
			out = append(out, d)
		}
	}
	return out
}
