// Package cronlog is robfig/cron's Logger over logrus, for every cron
// schedule in vigil (the overrides' expiry, the daily digest).
package cronlog
