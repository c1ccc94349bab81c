-- post.lua: wrk script of `make bench` -- POSTs one fixed body on every
-- request and prints a one-line JSON summary that bench/service.c parses.
--   wrk -t2 -c64 -d3s -s bench/post.lua URL -- BODY_FILE [CONTENT_TYPE]
-- No response() callback on purpose: defining one makes wrk hand every
-- body to Lua, which would slow the load generator rather than the server.

function init(args)
  local path = args[1]
  if not path then
    error("post.lua: give the body file after --")
  end
  local f = assert(io.open(path, "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = args[2] or "application/json"
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, ' ..
    '"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}\n',
    summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), e.connect, e.read, e.write, e.status, e.timeout))
end
