package httpapi

import "net/http"

// The prologues shared by handlers: read and check the path values, refuse
// query parameters the route does not take, read the body. Each check keeps
// its order so that a request with several faults gets the same error.

// namedPath reads the path value key, checks it as a name (what names it in
// errors) and refuses any query parameter.
func namedPath(r *http.Request, key, what string) (string, error) {
	v := r.PathValue(key)
	check := checkName(what, v)
	if key == "queue" {
		check = checkQueueName(v) // qualified by wrap
	}
	if check != nil {
		return "", check
	}
	if err := noQuery(r); err != nil {
		return "", err
	}
	return v, nil
}

// namedBody is namedPath followed by reading the request body.
func namedBody(r *http.Request, key, what string) (string, []byte, error) {
	v, err := namedPath(r, key, what)
	if err != nil {
		return "", nil, err
	}
	body, err := readBody(r)
	if err != nil {
		return "", nil, err
	}
	return v, body, nil
}

// sessionBody is sessionPath followed by reading the request body.
func sessionBody(r *http.Request) (queue, session string, body []byte, err error) {
	queue, session, err = sessionPath(r)
	if err != nil {
		return "", "", nil, err
	}
	body, err = readBody(r)
	if err != nil {
		return "", "", nil, err
	}
	return queue, session, body, nil
}
