package dispatch

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"
)

// Factory is a dispatch policy as registered.
type Factory struct {
	// Summary is one line on what the policy does.
	Summary string
	// Params returns a pointer to a new parameter struct holding the
	// defaults; nil when the policy takes no parameters. Its fields are
	// declared by their tags (declare.go) and checked before New; a struct
	// with a Validate() error method is also checked by it.
	Params func() any
	// Single: the policy never has two copies of a batch open at once
	// (it sends another only after the first ended: a retry). A driver may
	// then make a batch's calls in its caller's goroutine. The property
	// test holds a Single policy to it.
	Single bool
	// New builds the policy over m from validated parameters (the pointer
	// Params returned, filled in; nil without Params). It may give m a
	// budget (m.SetBudget).
	New func(params any, m *Machine, env Env) (Policy, error)
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
	if f.Params != nil {
		if p := f.Params(); reflect.TypeOf(p).Kind() != reflect.Pointer || reflect.TypeOf(p).Elem().Kind() != reflect.Struct {
			panic(fmt.Sprintf("dispatch.Register(%q): Params must return a pointer to a struct", name))
		}
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

// Lookup returns the factory registered under name.
func Lookup(name string) (Factory, error) {
	regMu.RLock()
	f, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		return Factory{}, fmt.Errorf("policy: %q is not one of %s", name, strings.Join(Names(), ", "))
	}
	return f, nil
}

// Defaults returns the policy's parameter struct holding its defaults (nil
// for a policy without parameters).
func Defaults(name string) (any, error) {
	f, err := Lookup(name)
	if err != nil || f.Params == nil {
		return nil, err
	}
	return f.Params(), nil
}

// New builds a Machine running policy name with params (nil: the
// defaults) for env.
func New(name string, params any, env Env) (*Machine, error) {
	f, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if env.Replicas < 1 {
		return nil, fmt.Errorf("dispatch %s: %d replicas", name, env.Replicas)
	}
	if params == nil && f.Params != nil {
		params = f.Params()
	}
	if err := validate(params); err != nil {
		return nil, err
	}
	m := newMachine(name, env)
	p, err := f.New(params, m, env)
	if err != nil {
		return nil, err
	}
	m.policy = p
	return m, nil
}

// SetBudget gives m an extra-load budget of ratio duplicates per batch over
// window (0: DefaultBudgetWindow); a policy's New calls it.
func (m *Machine) SetBudget(ratio float64, window time.Duration) error {
	if window == 0 {
		window = DefaultBudgetWindow
	}
	b, err := NewBudget(ratio, window)
	if err != nil {
		return err
	}
	m.budget = b
	return nil
}

// rng returns a policy's random source for env.
func rng(env Env) *rand.Rand { return rand.New(rand.NewPCG(env.Seed, 0x9e3779b97f4a7c15)) }
