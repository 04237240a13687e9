//! `status KEY...` (several keys) and `list` as a table a person can
//! scan: a header, one row per holder (a semaphore has a row per holder),
//! columns aligned. Everything in a cell came from Redis and is escaped
//! and cut; `--json` stays the interface for scripts.

use std::time::{Duration, SystemTime};

use super::view::{LockView, SlotView};
use crate::holder::Shown;
use crate::log::short;
use crate::secrets::untrusted;

/// The longest COMMAND shown in a row, in characters.
const COMMAND_MAX: usize = 60;

/// One row: the cells in the order of [`HEADER`].
type Row = [String; 10];

const HEADER: [&str; 10] = [
    "KEY",
    "STATE",
    "HOLDER",
    "LABEL",
    "HELD FOR",
    "EXPIRES IN",
    "FENCE",
    "WAITERS",
    "NODES",
    "COMMAND",
];

/// Column index of NODES: shown only when some lock lives on several nodes.
const NODES: usize = 8;

/// The table of `views`, a header first, each line without its newline.
pub fn table(views: &[LockView], now: SystemTime) -> Vec<String> {
    let rows: Vec<Row> = views.iter().flat_map(|v| rows(v, now)).collect();
    let several = views.iter().any(|v| v.nodes > 1);
    let shown: Vec<usize> = (0..HEADER.len())
        .filter(|&c| c != NODES || several)
        .collect();
    let header: Row = HEADER.map(String::from);
    let widths: Vec<usize> = shown
        .iter()
        .map(|&c| {
            std::iter::once(&header)
                .chain(&rows)
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    std::iter::once(&header)
        .chain(&rows)
        .map(|row| line(row, &shown, &widths))
        .collect()
}

/// Cells padded to their column's width, two spaces apart; the last one
/// (COMMAND) unpadded, and no trailing blanks.
fn line(row: &Row, shown: &[usize], widths: &[usize]) -> String {
    let mut out = String::new();
    for (i, (&c, &width)) in shown.iter().zip(widths).enumerate() {
        let cell = &row[c];
        out.push_str(cell);
        if i + 1 < shown.len() {
            let pad = width.saturating_sub(cell.chars().count()) + 2;
            out.extend(std::iter::repeat_n(' ', pad));
        }
    }
    out.trim_end().to_string()
}

/// A lock's rows: one for a plain lock (held or free), one per holder of
/// a held semaphore.
fn rows(view: &LockView, now: SystemTime) -> Vec<Row> {
    let key = untrusted(&view.key);
    let waiters = match view.line.count {
        0 => "-".to_string(),
        n => n.to_string(),
    };
    if view.slotted() && view.held {
        let state = match view.shared {
            true => "held (shared)".to_string(),
            false => format!("held (limit {})", view.limit),
        };
        return view
            .held_slots()
            .map(|slot| slot_row(&key, &state, view, slot, now))
            .collect();
    }
    if !view.held {
        // Unknown: held on some nodes, and those that did not answer
        // could make it a majority (the sentence says so in full).
        let state = match (view.undecided, view.holding) {
            (true, _) => "unknown",
            (false, 0) => "free",
            (false, _) => "free (no majority)",
        };
        let fence = match view.fence {
            0 => "-".to_string(),
            fence => fence.to_string(),
        };
        let mut row: Row = Default::default();
        row[0] = key;
        row[1] = state.to_string();
        row[6] = fence;
        row[7] = waiters;
        row[8] = nodes(view.most_holding(), view.nodes);
        return vec![row.map(dash)];
    }
    let state = match (view.revoked, &view.holder.ended_at) {
        (true, _) => "revoked",
        _ if view.holder.hold_reason.is_some() => "on hold",
        (false, Some(_)) => "kept (min-hold)",
        (false, None) => "held",
    };
    let who = view
        .holder
        .who_alone(Some(view.token.as_deref().unwrap_or("?")));
    let mut row = holder_row(&key, state, who, &view.holder, view.pttl, now);
    row[6] = view.fence.to_string();
    row[7] = waiters;
    row[8] = nodes(view.holding, view.nodes);
    vec![row.map(dash)]
}

fn slot_row(key: &str, state: &str, view: &LockView, slot: &SlotView, now: SystemTime) -> Row {
    let state = match (slot.revoked, &slot.holder.ended_at) {
        (true, _) => "revoked",
        (false, Some(_)) => "kept (min-hold)",
        (false, None) => state,
    };
    let who = slot.holder.who_alone(Some(&slot.token));
    let mut row = holder_row(key, state, who, &slot.holder, slot.pttl, now);
    row[6] = match slot.fence {
        0 => String::new(),
        fence => fence.to_string(),
    };
    row[8] = nodes(slot.holding, view.nodes);
    // A shared lock has a line (a semaphore none).
    if view.line.count > 0 {
        row[7] = view.line.count.to_string();
    }
    row.map(dash)
}

/// The cells every holder has: who, label, for how long, until when, what.
fn holder_row(
    key: &str,
    state: &str,
    who: String,
    holder: &Shown,
    pttl: Option<Duration>,
    now: SystemTime,
) -> Row {
    let mut row: Row = Default::default();
    row[0] = key.to_string();
    row[1] = state.to_string();
    row[2] = who;
    row[3] = holder.label.as_deref().map(untrusted).unwrap_or_default();
    row[4] = holder.age(now).map(short).unwrap_or_default();
    row[5] = match pttl {
        Some(left) => short(left),
        None => "never".to_string(),
    };
    row[9] = match &holder.hold_reason {
        // A hold has no COMMAND: its reason stands there.
        Some(reason) => command(&format!("(hold) {reason}")),
        None => holder.command.as_deref().map(command).unwrap_or_default(),
    };
    row
}

/// COMMAND, escaped and cut to [`COMMAND_MAX`] characters.
fn command(text: &str) -> String {
    let shown = untrusted(text);
    match shown.char_indices().nth(COMMAND_MAX) {
        Some((at, _)) => format!("{}…", &shown[..at]),
        None => shown,
    }
}

/// "2/3" with several nodes; nothing with one.
fn nodes(holding: usize, nodes: usize) -> String {
    match nodes {
        0 | 1 => String::new(),
        n => format!("{holding}/{n}"),
    }
}

/// An empty cell reads "-", so that columns never look shifted.
fn dash(cell: String) -> String {
    match cell.is_empty() {
        true => "-".to_string(),
        false => cell,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Inspected, Line, Slot};

    fn now() -> SystemTime {
        humantime::parse_rfc3339("2026-12-01T10:00:12Z").expect("time")
    }

    fn record(host: &str, label: Option<&str>, command: &str) -> Vec<(String, String)> {
        let mut fields = vec![
            ("host", host),
            ("pid", "4242"),
            ("user", "root"),
            ("command", command),
            ("acquired_at", "2026-12-01T10:00:00.000Z"),
        ];
        if let Some(label) = label {
            fields.push(("label", label));
        }
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn held(key: &str, fence: i64, label: Option<&str>) -> LockView {
        let answer = Inspected {
            token: Some("t1".into()),
            pttl: Some(Duration::from_secs(18)),
            fence,
            holder: record("web1", label, "pg_dump -f /backup/db.sql"),
            ..Inspected::default()
        };
        LockView::merge(key, 1, [answer].iter())
    }

    #[test]
    fn a_header_and_aligned_columns() {
        let mut deploy = held("deploy", 1796134733452711, Some("https://ci/runs/7"));
        deploy.line = Line {
            count: 2,
            waiters: Vec::new(),
        };
        let free = LockView::merge(
            "report",
            1,
            [Inspected {
                fence: 7,
                ..Inspected::default()
            }]
            .iter(),
        );
        let lines = table(&[held("backup", 42, None), deploy, free], now());
        assert_eq!(
            lines,
            [
                "KEY     STATE  HOLDER                LABEL              HELD FOR  EXPIRES IN  \
                 FENCE             WAITERS  COMMAND",
                "backup  held   web1 pid 4242 (root)  -                  12s       18s         \
                 42                -        pg_dump -f /backup/db.sql",
                "deploy  held   web1 pid 4242 (root)  https://ci/runs/7  12s       18s         \
                 1796134733452711  2        pg_dump -f /backup/db.sql",
                "report  free   -                     -                  -         -           \
                 7                 -        -",
            ]
        );
    }

    #[test]
    fn a_semaphore_has_a_row_per_holder_and_cells_are_escaped() {
        let slot = |token: &str, fence: &str, host: &str| {
            let mut holder = record(host, None, "job\nrm -rf");
            holder.push(("fence".into(), fence.into()));
            Slot {
                token: token.into(),
                pttl: Some(Duration::from_secs(20)),
                holder,
            }
        };
        let pool = Inspected {
            limit: Some(3),
            fence: 6,
            slots: vec![slot("b", "6", "web2"), slot("a", "5", "we\u{1b}b1")],
            ..Inspected::default()
        };
        let view = LockView::merge("pool", 1, [pool].iter());
        let lines = table(&[view], now());
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[1].starts_with("pool  held (limit 3)  we\\u{1b}b1 pid 4242"));
        assert!(lines[2].starts_with("pool  held (limit 3)  web2 pid 4242"));
        assert!(lines[1].ends_with("job\\nrm -rf"), "{lines:?}");
        assert!(lines.iter().all(|l| !l.chars().any(char::is_control)));
    }

    #[test]
    fn nodes_only_with_several() {
        let copy = || Inspected {
            token: Some("t1".into()),
            pttl: Some(Duration::from_secs(18)),
            fence: 9,
            holder: record("web1", None, "job"),
            ..Inspected::default()
        };
        let view = LockView::merge("job", 3, [copy(), copy(), Inspected::default()].iter());
        let lines = table(&[view], now());
        assert!(lines[0].contains("  NODES  COMMAND"), "{lines:?}");
        assert!(lines[1].contains("  2/3    job"), "{lines:?}");
        let one = table(&[held("job", 9, None)], now());
        assert!(!one[0].contains("NODES"), "{one:?}");
        // 2 of 3 answered, one holds it: unknown, not free.
        let view = LockView::merge("job", 3, [copy(), Inspected::default()].iter());
        let lines = table(&[view], now());
        assert!(lines[1].starts_with("job  unknown  -  "), "{lines:?}");
        assert!(lines[1].contains("  1/3    -"), "{lines:?}");
    }
}
