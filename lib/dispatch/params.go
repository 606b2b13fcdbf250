package dispatch

import (
	"github.com/robinhoodcache/robinhood/lib/config"
)

// BudgetParams are the extra-load budget every duplicating policy takes
// (Budget): at most Budget duplicates per batch over BudgetWindow.
type BudgetParams struct {
	Budget       float64         `json:"budget" range:"[0,10]" doc:"duplicates per batch at most, over budget_window"`
	BudgetWindow config.Duration `json:"budget_window" range:"[1ms,1h]" doc:"the sliding window of the budget"`
}

// Budgeted returns the budget of a policy's parameters (through embedding:
// every duplicating policy's parameters have one).
func (p *BudgetParams) Budgeted() *BudgetParams { return p }

func (p *BudgetParams) apply(m *Machine) error { return m.SetBudget(p.Budget, p.BudgetWindow.D()) }

func budgetOf(ratio float64) BudgetParams {
	return BudgetParams{Budget: ratio, BudgetWindow: config.Duration(DefaultBudgetWindow)}
}
