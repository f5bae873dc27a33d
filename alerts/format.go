package alerts

import "net/url"

// displayURL is the engine URL as pages show it: never any userinfo or
// query, which is where credentials hide in URLs.
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}
