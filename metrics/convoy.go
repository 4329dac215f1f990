package metrics

import (
	"github.com/drover-run/drover"
	"github.com/drover-run/drover/convoy"
	dt "github.com/drover-run/drover/drovertype"
	"github.com/drover-run/drover/internal/instrument"
)

// ConvoyObserver records what a convoy.Client's session receivers and
// processors do with the metrics of c, which NewCollector(c) serves: the
// session locks they renew or find lost (drover_session_locks_total) and
// the sessions they block (drover_alerts_by_kind_total, kind
// session_blocked). Give it as convoy.Config.Observer.
func ConvoyObserver(c *drover.Client) convoy.Observer {
	return convoyObserver{instrument.ClientRecorder(c)}
}

type convoyObserver struct{ r *instrument.Recorder }

func (o convoyObserver) SessionLock(queue string, renewed bool) { o.r.SessionLock(queue, renewed) }

func (o convoyObserver) Alert(e *convoy.Event) {
	o.r.Observe([]instrument.Observation{{Kind: instrument.Alert, Namespace: dt.NamespaceOf(e.TaskID), State: string(e.Type)}})
}
