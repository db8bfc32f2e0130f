//! The fields of "/proc/PID/stat" the mount reads: a process's state, its parent, its
//! session, whether it is a kernel thread and when it started. Anyone may read these,
//! also of another user's process.
//!
//! The second field is the command name in parentheses, and a command name may hold
//! spaces and parentheses itself (`prctl(PR_SET_NAME)` sets any 15 bytes), so the
//! fields after it are counted from the line's last `)`.

/// Fields of one process's "/proc/PID/stat".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: `R` (runs or waits for a CPU), `S`, `D`, `T`, `Z` (a zombie), `X`, ...
    pub state: char,
    /// Field 4: the parent's pid.
    pub ppid: u32,
    /// Field 6: the session id (its leader's pid).
    pub session: u32,
    /// Field 9 has `PF_KTHREAD`: a kernel thread, which holds no descriptors.
    pub kernel_thread: bool,
    /// Field 22: when the process started, in clock ticks since boot.
    pub start_time: u64,
}

/// `PF_KTHREAD` in the flags of "/proc/PID/stat" (field 9).
const PF_KTHREAD: u64 = 0x0020_0000;

impl Stat {
    /// Whether the process has ended (a zombie nobody has reaped yet, or dead).
    pub fn ended(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Process `pid`'s stat, or `None` when it is gone or the file does not parse.
pub fn of(pid: u32) -> Option<Stat> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The fields of one "/proc/PID/stat" line.
pub fn parse(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    // `rest` begins with field 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let mut state = fields.first()?.chars();
    let (Some(state), None) = (state.next(), state.next()) else {
        return None;
    };
    let flags: u64 = fields.get(6)?.parse().ok()?;
    Some(Stat {
        state,
        ppid: fields.get(1)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        kernel_thread: flags & PF_KTHREAD != 0,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line of a process named `comm`, fields 3 to 52 as Linux writes them.
    fn line(comm: &str) -> String {
        format!(
            "4242 ({comm}) S 17 4242 4240 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 987654 \
             5472256 230 18446744073709551615 1 1 0 0 0 0 0 0 65536 0 0 0 17 1 0 0 0 0 0 \
             0 0 0 0 0 0 0 0\n"
        )
    }

    #[test]
    fn fields_after_a_plain_command_name() {
        let s = parse(&line("sh")).unwrap();
        assert_eq!(
            s,
            Stat {
                state: 'S',
                ppid: 17,
                session: 4240,
                kernel_thread: false,
                start_time: 987_654
            }
        );
        assert!(!s.ended());
        let kthread = line("kworker/0:1").replace(" 4194560 ", " 69238880 ");
        assert!(parse(&kthread).unwrap().kernel_thread);
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        for comm in ["a b", "x) R 1 2 (y", "((", "))", ") Z 9 ", "( S 3 ) D 5"] {
            assert_eq!(
                parse(&line(comm)),
                Some(Stat {
                    state: 'S',
                    ppid: 17,
                    session: 4240,
                    kernel_thread: false,
                    start_time: 987_654
                }),
                "{comm:?}"
            );
        }
    }

    #[test]
    fn a_line_cut_short_or_garbled_is_none() {
        let full = line("sh");
        assert_eq!(parse(""), None);
        assert_eq!(parse("4242 (sh"), None);
        assert_eq!(parse(&full[..full.find(" 987654").unwrap()]), None);
        assert_eq!(parse(&full.replace(" S 17 ", " S x ")), None);
        assert_eq!(parse(&full.replace(" S 17 ", " SS 17 ")), None);
    }

    #[test]
    fn a_zombie_has_ended() {
        let z = parse(&line("sh").replace(") S ", ") Z ")).unwrap();
        assert!(z.ended());
    }

    #[test]
    fn this_process_reads_as_running_with_its_parent() {
        let me = of(std::process::id()).unwrap();
        assert!(!me.ended());
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        assert!(!me.kernel_thread);
        // The session as "/proc/PID/status" writes it (its "NSsid" line's last field); 0
        // where no ancestor ever called setsid (under a container's or VM's init, as in CI).
        let status = std::fs::read_to_string(format!("/proc/{}/status", std::process::id()));
        let sid = status.unwrap().lines().find_map(|l| {
            l.strip_prefix("NSsid:")
                .and_then(|v| v.split_whitespace().last()?.parse::<u32>().ok())
        });
        assert_eq!(Some(me.session), sid);
        assert!(me.start_time > 0);
        assert_eq!(of(u32::MAX), None);
    }
}
