//! Makes the SHA1 digest of each Lua script at build time, for EVALSHA
//! (see `src/lock/wire.rs`): a run then sends 40 bytes where it would send
//! the script's text (the acquire's is 20 KB), and hashes nothing (SHA1
//! of that text took 0.15 ms of a run's start in the size-optimised build).
//! The scripts' module is read as it is compiled into the binary.

use std::{env, fs, path::Path};

#[allow(dead_code)]
#[path = "src/lock/scripts/mod.rs"]
mod scripts;

fn main() {
    println!("cargo::rerun-if-changed=src/lock/scripts");
    let mut out = String::from(
        "/// The SHA1 digest of each script of `scripts::ALL`, in its order\n\
         /// (lower-case hex, as Redis names a script), made by build.rs.\n",
    );
    out += &format!("const DIGESTS: [&str; {}] = [\n", scripts::ALL.len());
    for (text, _) in scripts::ALL {
        out += &format!("    \"{}\",\n", sha1_smol::Sha1::from(text).digest());
    }
    out += "];\n";
    let dir = env::var("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    fs::write(Path::new(&dir).join("digests.rs"), out).expect("writing digests.rs to OUT_DIR");
}
