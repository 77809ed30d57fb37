module tokenpilot.local/kind/pause

go 1.24
