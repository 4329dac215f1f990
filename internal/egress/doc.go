// Package egress decides where drover's outbound calls may connect: the
// built-in HTTP agent's requests and webhook deliveries. Both callers and a
// task's data (a URL taken from the input, a callback URL) choose
// destinations, so without a policy anyone allowed to submit a task could
// make the server fetch its own internal services and cloud metadata.
//
// A Policy refuses the addresses Refused lists (loopback, private,
// link-local, unspecified, multicast and other special-purpose ranges)
// unless an allow Rule opens them, and lets every other (public) address
// through. The check happens twice:
//
//   - On the URL, before anything is sent (CheckURL): an IP literal in a
//     refused range, a localhost name, a number that is not a standard IP
//     address ("2130706433", "0177.0.0.1"), or, for a policy restricted to
//     a list of hosts (Restrict), a host not in the list.
//   - On every address actually connected to (Dial, Transport): the
//     net.Dialer's Control hook sees the resolved address of each attempt,
//     so a name resolving (or re-resolving, DNS rebinding) to a refused
//     address is caught whatever the resolver returns, for the first
//     connection and for any later one.
//
// Rules open destinations: an IP address or CIDR prefix opens the
// addresses it contains; an exact host name opens every address it
// resolves to (its DNS is trusted); a wildcard name (*.example.com) opens
// none, it only matches names for Restrict. A rule with a port opens that
// port only.
//
// Connections never go through a proxy (HTTP_PROXY and HTTPS_PROXY are
// ignored): the dial would reach the proxy, and the check would see the
// proxy's address instead of the destination's.
//
// Package server builds the process's policy from --egress-allow (and
// workflowdef adds each workflow file's own hosts); the built-in HTTP
// agent (package httpagent) and the webhook dispatcher connect through it.
package egress
