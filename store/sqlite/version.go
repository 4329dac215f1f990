package sqlite

// LatestSchemaVersion is the version of the newest migration this driver
// embeds: the schema version "drover migrate" brings a database to.
func LatestSchemaVersion() (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	return ms[len(ms)-1].Version, nil
}
