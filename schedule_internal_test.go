package drover

import "context"

// FireSchedules runs one round of the schedule leader: it takes (or
// renews) the lease and fires what is due, for tests on a fake clock.
func (c *Client) FireSchedules(ctx context.Context) (int, error) {
	r := c.scheduleRunner()
	if _, err := r.Elector().TryAcquire(ctx); err != nil {
		return 0, err
	}
	return r.RunService(ctx, c.scheduleService())
}
