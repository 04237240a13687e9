//! Tests of the Sentinel and Cluster harness itself (tests/common/topology.rs),
//! asserting real server behaviour with plain `redis` connections. Each test
//! starts its own topology.

use crate::common::*;

use std::collections::HashMap;
use std::time::{Duration, Instant};

fn set_key(conn: &mut redis::Connection, key: &str, value: &str) -> redis::RedisResult<()> {
    redis::cmd("SET").arg(key).arg(value).exec(conn)
}

/// WAIT for `n` replicas (1 s at most); returns how many acknowledged.
fn wait_replicas(conn: &mut redis::Connection, n: usize) -> usize {
    redis::cmd("WAIT").arg(n).arg(1000).query(conn).unwrap()
}

fn replication(port: u16) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn_to(port))
        .unwrap();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn conn_to(port: u16) -> redis::Connection {
    let conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn
}

fn assert_replica_of(port: u16, primary: u16) {
    let r = replication(port);
    assert_eq!(r["role"], "slave", "{port}: {r:?}");
    assert_eq!(r["master_port"], primary.to_string(), "{port}: {r:?}");
    assert_eq!(r["master_link_status"], "up", "{port}: {r:?}");
}

fn sentinel_names(sentinel: u16) -> Option<(String, String)> {
    redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(SENTINEL_SERVICE)
        .query(&mut conn_to(sentinel))
        .unwrap()
}

// --------------------------------------------------------------- Sentinel --

#[test]
fn sentinel_set_starts_with_agreeing_sentinels_and_synced_replicas() {
    let t = Instant::now();
    let set = SentinelSet::start();
    eprintln!("sentinel set started in {:?}", t.elapsed());

    let data = set.data_ports();
    let sentinels = set.sentinel_ports();
    let mut all: Vec<u16> = data.iter().chain(&sentinels).copied().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 6, "ports must be distinct: {all:?}");
    assert!(!all.contains(&6379) && !all.contains(&26379));
    assert_eq!(set.service(), "mymaster");
    let hosts: Vec<String> = sentinels.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    assert_eq!(
        set.url(),
        format!("redis+sentinel://{}/mymaster", hosts.join(","))
    );

    assert_eq!(set.primary(), data[0]);
    for &s in &sentinels {
        let (host, port) = sentinel_names(s).expect("sentinel knows mymaster");
        assert_eq!((host.as_str(), port), ("127.0.0.1", data[0].to_string()));
    }
    assert_eq!(replication(data[0])["connected_slaves"], "2");
    assert_eq!(set.replicas(), data[1..].to_vec());

    let mut primary = set.primary_conn();
    set_key(&mut primary, "topo-k", "v").unwrap();
    assert_eq!(wait_replicas(&mut primary, 2), 2);
    for &r in &data[1..] {
        assert_replica_of(r, data[0]);
        assert_eq!(get(&mut conn_to(r), "topo-k").as_deref(), Some("v"));
    }
}

#[test]
fn sentinel_failover_moves_the_primary_and_demotes_the_old_one() {
    let mut set = SentinelSet::start();
    let old = set.primary();
    let mut conn = set.primary_conn();
    set_key(&mut conn, "topo-k", "before").unwrap();
    assert_eq!(wait_replicas(&mut conn, 2), 2);

    let t = Instant::now();
    let new = set.failover();
    eprintln!("SENTINEL FAILOVER settled in {:?}", t.elapsed());
    assert_ne!(new, old);
    assert_eq!(set.primary(), new);
    for s in set.sentinel_ports() {
        assert_eq!(sentinel_names(s).unwrap().1, new.to_string());
    }
    assert_eq!(replication(new)["role"], "master");
    assert_replica_of(old, new);

    let mut conn = set.primary_conn();
    assert_eq!(get(&mut conn, "topo-k").as_deref(), Some("before"));
    set_key(&mut conn, "topo-k", "after").unwrap();
    assert_eq!(wait_replicas(&mut conn, 2), 2);
    let err = set_key(&mut conn_to(old), "topo-k", "stale").unwrap_err();
    assert_eq!(err.code(), Some("READONLY"), "{err}");
    assert_eq!(get(&mut conn_to(old), "topo-k").as_deref(), Some("after"));
}

#[test]
fn sentinel_killing_the_primary_promotes_a_replica_even_with_a_sentinel_down() {
    let mut set = SentinelSet::start();
    let replicas = set.replicas();
    let mut conn = set.primary_conn();
    set_key(&mut conn, "topo-k", "v").unwrap();
    assert_eq!(wait_replicas(&mut conn, 2), 2);

    // Two of three sentinels are still a quorum and a majority.
    set.kill_sentinel(0);
    assert!(!set.sentinel(0).is_running());
    let t = Instant::now();
    let old = set.kill_primary();
    let new = set.wait_for_new_primary(old, TOPOLOGY_TIMEOUT);
    eprintln!(
        "sentinels promoted a replica {:?} after SIGKILL",
        t.elapsed()
    );
    assert!(replicas.contains(&new), "{new} not in {replicas:?}");
    assert!(!set.data_node(old).is_running());
    let other = replicas.into_iter().find(|&r| r != new).unwrap();
    set.wait_replicas_connected(new);
    assert_replica_of(other, new);
    assert_eq!(get(&mut set.primary_conn(), "topo-k").as_deref(), Some("v"));

    let t = Instant::now();
    set.restart_as_replica(old);
    eprintln!(
        "old primary back as a replica {:?} after restart",
        t.elapsed()
    );
    assert_replica_of(old, new);
    assert_eq!(get(&mut conn_to(old), "topo-k").as_deref(), Some("v"));
}

#[test]
fn sentinel_paused_primary_comes_back_as_a_replica() {
    let mut set = SentinelSet::start();
    let t = Instant::now();
    let (old, new) = set.pause_primary_past_down_after();
    eprintln!(
        "sentinels promoted a replica {:?} after SIGSTOP",
        t.elapsed()
    );
    assert_ne!(old, new);
    assert_eq!(replication(new)["role"], "master");

    let t = Instant::now();
    set.resume_as_replica(old);
    eprintln!("paused primary demoted {:?} after SIGCONT", t.elapsed());
    assert_replica_of(old, new);
    assert_eq!(set.primary(), new);
}

// ---------------------------------------------------------------- Cluster --

#[test]
fn cluster_starts_with_all_slots_ok_and_a_wrong_node_answers_moved() {
    let t = Instant::now();
    let cluster = Cluster::start();
    eprintln!("cluster started in {:?}", t.elapsed());

    let ports = cluster.ports();
    let mut distinct = ports.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 6);
    // Each node's cluster bus listens on port + 10000.
    assert!(ports.iter().all(|&p| p <= 65535 - 10000), "{ports:?}");
    let seeds: Vec<String> = ports[..3]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", seeds.join(","))
    );
    for &p in &ports {
        let text: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut cluster.conn(p))
            .unwrap();
        assert!(text.contains("cluster_state:ok"), "{p}: {text}");
        assert!(text.contains("cluster_slots_ok:16384"), "{p}: {text}");
        assert!(text.contains("cluster_known_nodes:6"), "{p}: {text}");
    }
    let mut primaries = cluster.primaries();
    primaries.sort();
    assert_eq!(primaries.len(), 3);
    let mut replicas: Vec<u16> = primaries.iter().map(|&p| cluster.replica_of(p)).collect();
    replicas.sort();
    replicas.dedup();
    assert_eq!(replicas.len(), 3);
    for &p in &primaries {
        assert_replica_of(cluster.replica_of(p), p);
    }

    // Hash tags: only the part in braces is hashed.
    let slot = cluster.slot_of("{topo}-k");
    assert_eq!(cluster.slot_of("topo"), slot);
    assert_eq!(cluster.slot_of("{topo}:holder"), slot);
    assert_eq!(cluster.slot_of("foo"), 12182); // the example in the Redis docs

    let owner = cluster.primary_for_slot(slot);
    set_key(&mut cluster.conn(owner), "{topo}-k", "v").unwrap();
    let wrong = cluster.port_not_owning(slot);
    assert_ne!(wrong, owner);
    assert_eq!(
        cluster.seed_not_owning(slot),
        format!("redis+cluster://127.0.0.1:{wrong}")
    );
    let err = get_err(&mut cluster.conn(wrong), "{topo}-k");
    assert_eq!(err.code(), Some("MOVED"), "{err}");
    assert_eq!(
        err.redirect_node(),
        Some((format!("127.0.0.1:{owner}").as_str(), slot))
    );
}

fn get_err(conn: &mut redis::Connection, key: &str) -> redis::RedisError {
    redis::cmd("GET")
        .arg(key)
        .query::<Option<String>>(conn)
        .expect_err("GET on a node that does not own the slot")
}

#[test]
fn cluster_migrate_slot_moves_the_slot_and_its_keys() {
    let mut cluster = Cluster::start();
    let slot = cluster.slot_of("{mig}");
    let from = cluster.primary_for_slot(slot);
    let to = cluster.port_not_owning(slot);
    // More keys than one GETKEYSINSLOT batch.
    let mut conn = cluster.conn(from);
    for i in 0..250 {
        set_key(&mut conn, &format!("{{mig}}-{i}"), &i.to_string()).unwrap();
    }

    let t = Instant::now();
    cluster.migrate_slot(slot, to);
    eprintln!("slot migrated with 250 keys in {:?}", t.elapsed());
    assert_eq!(cluster.primary_for_slot(slot), to);
    let mut conn = cluster.conn(to);
    assert_eq!(get(&mut conn, "{mig}-0").as_deref(), Some("0"));
    assert_eq!(get(&mut conn, "{mig}-249").as_deref(), Some("249"));
    let n: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut conn)
        .unwrap();
    assert_eq!(n, 250);
    let n: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut cluster.conn(from))
        .unwrap();
    assert_eq!(n, 0);
    let err = get_err(&mut cluster.conn(from), "{mig}-0");
    assert_eq!(
        err.redirect_node(),
        Some((format!("127.0.0.1:{to}").as_str(), slot)),
        "{err}"
    );
    // The migrated keys reach the new owner's replica.
    let mut replica = conn_to(cluster.replica_of(to));
    redis::cmd("READONLY").exec(&mut replica).unwrap();
    assert!(wait_until(Duration::from_secs(10), || get(
        &mut replica,
        "{mig}-249"
    )
    .is_some()));
}

#[test]
fn cluster_manual_failover_promotes_the_replica() {
    let mut cluster = Cluster::start();
    let slot = cluster.slot_of("{fo}");
    let old = cluster.primary_for_slot(slot);
    let replica = cluster.replica_of(old);
    let mut conn = cluster.conn(old);
    set_key(&mut conn, "{fo}-k", "v").unwrap();
    assert_eq!(wait_replicas(&mut conn, 1), 1);

    let t = Instant::now();
    let new = cluster.failover_replica_of(old);
    eprintln!("CLUSTER FAILOVER settled in {:?}", t.elapsed());
    assert_eq!(new, replica);
    assert_eq!(cluster.primary_for_slot(slot), new);
    assert_eq!(replication(new)["role"], "master");
    assert_replica_of(old, new);
    assert_eq!(cluster.replica_of(new), old);
    assert_eq!(get(&mut cluster.conn(new), "{fo}-k").as_deref(), Some("v"));
    let err = get_err(&mut cluster.conn(old), "{fo}-k");
    assert_eq!(err.code(), Some("MOVED"), "{err}");
}

#[test]
fn cluster_killing_a_primary_promotes_its_replica() {
    let mut cluster = Cluster::start();
    let slot = cluster.slot_of("{kill}");
    let owner = cluster.primary_for_slot(slot);
    let mut conn = cluster.conn(owner);
    set_key(&mut conn, "{kill}-k", "v").unwrap();
    assert_eq!(wait_replicas(&mut conn, 1), 1);

    let t = Instant::now();
    let (old, new) = cluster.kill_primary_for_slot(slot);
    eprintln!("cluster promoted a replica {:?} after SIGKILL", t.elapsed());
    assert_eq!(old, owner);
    assert!(!cluster.node(old).is_running());
    assert_eq!(cluster.primary_for_slot(slot), new);
    assert_eq!(
        get(&mut cluster.conn(new), "{kill}-k").as_deref(),
        Some("v")
    );

    // Restarted from its nodes.conf, the old primary rejoins as a replica.
    let t = Instant::now();
    cluster.node(old).restart();
    cluster.wait_ok();
    eprintln!("killed primary rejoined as a replica in {:?}", t.elapsed());
    assert_replica_of(old, new);
}
