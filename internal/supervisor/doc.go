// Package supervisor is the Supervisor role: periodically, and only while it
// is the elected leader, it finds tasks whose CompleteBy has passed and asks
// for their recovery (retry, Error with an alert, or compensation), and
// deletes final tasks past their retention. Both chores are services of
// package maintenance under the lease LeaseName. It knows no business
// logic: thresholds and policies come from the task record.
//
// Package engine runs it in the processes with the supervisor role.
package supervisor
