package dispatch

import (
	"fmt"
	"time"

	"github.com/robinhoodcache/robinhood/lib/config"
)

// BudgetParams are the extra-load budget every duplicating policy takes
// (Budget): at most Budget duplicates per batch over BudgetWindow.
type BudgetParams struct {
	Budget       float64         `json:"budget" doc:"duplicates per batch at most, over budget_window (0 to 10)"`
	BudgetWindow config.Duration `json:"budget_window" doc:"the sliding window of the budget"`
}

// Validate checks the budget.
func (p *BudgetParams) Validate() error {
	if !(p.Budget >= 0) || p.Budget > 10 {
		return fmt.Errorf("budget: %g is not between 0 and 10", p.Budget)
	}
	if w := p.BudgetWindow.D(); w < time.Millisecond || w > time.Hour {
		return fmt.Errorf("budget_window: %v is not between 1ms and 1h", w)
	}
	return nil
}

// Budgeted returns the budget of a policy's parameters (through embedding:
// every duplicating policy's parameters have one).
func (p *BudgetParams) Budgeted() *BudgetParams { return p }

func (p *BudgetParams) apply(m *Machine) error { return m.SetBudget(p.Budget, p.BudgetWindow.D()) }

func budgetOf(ratio float64) BudgetParams {
	return BudgetParams{Budget: ratio, BudgetWindow: config.Duration(DefaultBudgetWindow)}
}
