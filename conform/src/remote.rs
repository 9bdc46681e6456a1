//! An agent in another process or on another host, reached over TCP: one
//! JSON object per line each way. `conform/agent/roce-conform-agent.py`
//! is such an agent (pyverbs: kernel rxe, a NIC, or roce-emu under
//! `roce run`). Requests are `{"op": NAME, "seq": N, ...}`; every reply has
//! `"ok"`, echoes `"seq"`, and on failure has `"error"` and `"unsupported"`.
//!
//! | op | fields | reply |
//! |---|---|---|
//! | `hello` | | `describe`, `addr` |
//! | `setup` | the [`QpSetup`] fields (with its `params` flattened), `service` `"rc"`/`"uc"`/`"ud"`, `peer`, `srq` (receives to an SRQ), `stop_at` `"RTS"`/`"RTR"`, `window` (bytes of a window to bind), `window_type` (1 or 2), `ops` (1 FLUSH, 2 ATOMIC WRITE: n/a without) | `qpn`, `mr_addr`, `rkey`, `mw_rkey` |
//! | `post_recv` | `wr_id`, `offset`, `len` | |
//! | `post_send` | the [`SendReq`] fields | |
//! | `poll` | `want`, `wait_ms` | `wcs`: `[{wr_id, status, opcode, byte_len, imm}]` |
//! | `qp_state` | | `state`: `RESET` … `ERR` |
//! | `modify` | `state`: `SQD` or `RTS` | |
//! | `read` | `offset`, `len` | `hex` |
//! | `write` | `offset`, `hex` | |
//! | `teardown` | | |

use crate::agent::{Agent, AgentError, Completion, QpInfo, QpSetup, QpStateName, SendReq, Service};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// A connection to a remote agent.
pub struct RemoteAgent {
    out: TcpStream,
    inp: BufReader<TcpStream>,
    describe: String,
    addr: IpAddr,
    /// The last request's sequence number.
    seq: u64,
}

fn link(e: impl std::fmt::Display) -> AgentError {
    AgentError::Link(e.to_string())
}

impl RemoteAgent {
    /// Connect to the agent at `at` and greet it.
    pub fn connect(at: SocketAddr) -> Result<RemoteAgent, AgentError> {
        let out = TcpStream::connect_timeout(&at, Duration::from_secs(10))
            .map_err(|e| AgentError::Link(format!("connect to the agent at {at}: {e}")))?;
        out.set_read_timeout(Some(Duration::from_secs(30))).map_err(link)?;
        let inp = BufReader::new(out.try_clone().map_err(link)?);
        let mut a = RemoteAgent { out, inp, describe: String::new(), addr: at.ip(), seq: 0 };
        let r = a.call(json!({"op": "hello"}))?;
        a.describe = r["describe"].as_str().unwrap_or("remote agent").to_string();
        a.addr = r["addr"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| AgentError::Link(format!("hello: no device address in {r}")))?;
        Ok(a)
    }

    /// One request and its reply. Each request carries a sequence number
    /// the agent echoes: a reply that comes after its request timed out
    /// (a verb that hung in the device) is skipped, not taken for the
    /// next request's.
    fn call(&mut self, mut req: Value) -> Result<Value, AgentError> {
        self.seq += 1;
        req["seq"] = json!(self.seq);
        let mut line = req.to_string();
        line.push('\n');
        self.out.write_all(line.as_bytes()).map_err(link)?;
        let v = loop {
            let mut got = String::new();
            if self.inp.read_line(&mut got).map_err(link)? == 0 {
                return Err(AgentError::Link("the agent closed the connection".into()));
            }
            let v: Value = serde_json::from_str(&got)
                .map_err(|e| AgentError::Link(format!("bad reply {got:?}: {e}")))?;
            // (an agent that does not echo it is taken at its word)
            match v["seq"].as_u64() {
                Some(s) if s < self.seq => continue,
                _ => break v,
            }
        };
        if v["ok"].as_bool() == Some(true) {
            return Ok(v);
        }
        let why = v["error"].as_str().unwrap_or("no reason given").to_string();
        Err(if v["unsupported"].as_bool() == Some(true) {
            AgentError::Unsupported(why)
        } else {
            AgentError::Verb(why)
        })
    }
}

fn num(v: &Value, k: &str) -> Result<u64, AgentError> {
    v[k].as_u64().ok_or_else(|| AgentError::Link(format!("reply lacks {k}: {v}")))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

impl Agent for RemoteAgent {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn addr(&self) -> IpAddr {
        self.addr
    }

    fn setup(&mut self, setup: &QpSetup) -> Result<QpInfo, AgentError> {
        let s = &setup.params;
        // not in the protocol yet (and rxe has no XRC)
        if s.service == Service::Xrc {
            return Err(AgentError::Unsupported("XRC (not in the agent protocol)".into()));
        }
        if s.mcast {
            return Err(AgentError::Unsupported("multicast (not in the agent protocol)".into()));
        }
        let r = self.call(json!({
            "op": "setup",
            "service": match s.service { Service::Rc => "rc", Service::Uc => "uc", _ => "ud" },
            "peer": setup.peer.to_string(),
            "peer_qpn": setup.peer_qpn, "rq_psn": s.rq_psn, "sq_psn": s.sq_psn,
            "mr_len": s.mr_len, "mr_access": s.mr_access, "qp_access": s.qp_access, "mtu": s.mtu,
            "timeout": s.timeout, "retry_cnt": s.retry_cnt, "rnr_retry": s.rnr_retry,
            "min_rnr_timer": s.min_rnr_timer, "max_rd_atomic": s.max_rd_atomic,
            "max_dest_rd_atomic": s.max_dest_rd_atomic, "qkey": s.qkey,
            "srq": s.srq, "stop_at": state_name(s.stop_at), "window": s.window,
            "window_type": s.window_type,
            "ops": s.ops,
        }))?;
        Ok(QpInfo {
            qpn: num(&r, "qpn")? as u32,
            mr_addr: num(&r, "mr_addr")?,
            rkey: num(&r, "rkey")? as u32,
            mw_rkey: r["mw_rkey"].as_u64().unwrap_or(0) as u32,
            srqn: 0,
        })
    }

    fn post_recv(&mut self, wr_id: u64, offset: u64, len: u32) -> Result<(), AgentError> {
        self.call(json!({"op": "post_recv", "wr_id": wr_id, "offset": offset, "len": len}))
            .map(drop)
    }

    fn post_send(&mut self, w: &SendReq) -> Result<(), AgentError> {
        self.call(json!({
            "op": "post_send", "wr_id": w.wr_id, "opcode": w.opcode, "offset": w.offset, "len": w.len,
            "remote_addr": w.remote_addr, "rkey": w.rkey, "imm": w.imm,
            "compare_add": w.compare_add, "swap": w.swap, "fence": w.fence,
        }))
        .map(drop)
    }

    fn poll(&mut self, want: usize, wait: Duration) -> Result<Vec<Completion>, AgentError> {
        let r =
            self.call(json!({"op": "poll", "want": want, "wait_ms": wait.as_millis() as u64}))?;
        let wcs =
            r["wcs"].as_array().ok_or_else(|| AgentError::Link(format!("poll: no wcs in {r}")))?;
        wcs.iter()
            .map(|w| {
                Ok(Completion {
                    wr_id: num(w, "wr_id")?,
                    status: num(w, "status")? as u32,
                    opcode: num(w, "opcode")? as u32,
                    byte_len: num(w, "byte_len")? as u32,
                    imm: w["imm"].as_u64().map(|v| v as u32),
                })
            })
            .collect()
    }

    fn modify_qp(&mut self, state: QpStateName) -> Result<(), AgentError> {
        self.call(json!({"op": "modify", "state": state_name(state)})).map(drop)
    }

    fn qp_state(&mut self) -> Result<QpStateName, AgentError> {
        let r = self.call(json!({"op": "qp_state"}))?;
        let s = r["state"].as_str().unwrap_or("");
        QpStateName::ALL
            .into_iter()
            .find(|&q| state_name(q) == s)
            .ok_or_else(|| AgentError::Link(format!("unknown QP state {s:?}")))
    }

    fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, AgentError> {
        let r = self.call(json!({"op": "read", "offset": offset, "len": len}))?;
        r["hex"]
            .as_str()
            .and_then(unhex)
            .filter(|b| b.len() == len as usize)
            .ok_or_else(|| AgentError::Link(format!("read: bad hex for {len} bytes")))
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), AgentError> {
        self.call(json!({"op": "write", "offset": offset, "hex": hex(data)})).map(drop)
    }

    fn teardown(&mut self) -> Result<(), AgentError> {
        self.call(json!({"op": "teardown"})).map(drop)
    }
}

/// The `ibv_qp_state` name the protocol uses (`RTS`).
fn state_name(s: QpStateName) -> &'static str {
    match s {
        QpStateName::Reset => "RESET",
        QpStateName::Init => "INIT",
        QpStateName::Rtr => "RTR",
        QpStateName::Rts => "RTS",
        QpStateName::Sqd => "SQD",
        QpStateName::Sqe => "SQE",
        QpStateName::Err => "ERR",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_junk() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&b)).unwrap(), b);
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("é0"), None);
    }
}
