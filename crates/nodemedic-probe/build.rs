//! Compiles the C probes in `ebpf/` with clang (`-target bpf -O2 -g`: BTF and CO-RE
//! relocation records included) into `$OUT_DIR`, where the crate embeds them. Nothing
//! prebuilt is committed; nothing depends on the build host's kernel (the probes declare the
//! few kernel types they read themselves, see `ebpf/nodemedic_vmlinux.h`).
//!
//! Env: `NODEMEDIC_CLANG` (default `clang`), `NODEMEDIC_BPF_INCLUDE` (default: clang's own
//! search path, where Debian's libbpf-dev installs `bpf/bpf_helpers.h`).

use std::env;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

const PROBES: &[&str] = &["perf_wakeup"];
const SETUP: &str = "install them with `apt-get install clang llvm libbpf-dev` \
    (deploy/install.sh and tests/run-all.sh do this)";

fn fail(msg: &str) -> ! {
    eprintln!("error: nodemedic-probe: {msg}");
    exit(1);
}

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let src_dir = manifest.join("../../ebpf");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());
    let clang = env::var("NODEMEDIC_CLANG").unwrap_or_else(|_| "clang".to_owned());
    println!("cargo:rerun-if-env-changed=NODEMEDIC_CLANG");
    println!("cargo:rerun-if-env-changed=NODEMEDIC_BPF_INCLUDE");

    // One object for every target: the kprobes find their argument in x86-64's or arm64's
    // registers by the kernel's BTF at load time (ebpf/nodemedic_vmlinux.h), so nothing
    // here depends on the target but whether the probes know its registers.
    match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64" | "aarch64") => {}
        Ok(other) => fail(&format!(
            "eBPF probes support x86_64 and aarch64 targets, not {other}"
        )),
        Err(_) => fail("CARGO_CFG_TARGET_ARCH is not set"),
    }

    match Command::new(&clang).arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => fail(&format!(
            "`{clang} --version` failed ({}): the eBPF probes need clang; {SETUP}",
            out.status
        )),
        Err(e) => fail(&format!(
            "cannot run `{clang}` ({e}): the eBPF probes are compiled from ebpf/*.bpf.c with \
             clang and libbpf's headers; {SETUP}"
        )),
    }

    let include = env::var_os("NODEMEDIC_BPF_INCLUDE").map(PathBuf::from);
    let helpers_found = match &include {
        Some(dir) => dir.join("bpf/bpf_helpers.h").is_file(),
        None => ["/usr/include", "/usr/local/include"]
            .iter()
            .any(|d| Path::new(d).join("bpf/bpf_helpers.h").is_file()),
    };
    if !helpers_found {
        fail(&format!(
            "libbpf's headers (bpf/bpf_helpers.h) are missing; {SETUP}, or point \
             NODEMEDIC_BPF_INCLUDE at the directory holding bpf/"
        ));
    }

    for name in PROBES {
        let src = src_dir.join(format!("{name}.bpf.c"));
        let obj = out_dir.join(format!("{name}.bpf.o"));
        let mut cmd = Command::new(&clang);
        cmd.args(["-target", "bpf", "-O2", "-g", "-Wall", "-Werror"])
            // Reproducible objects: no build paths in the BTF/DWARF strings, the sources' nor
            // the compilation directory's (clang runs in this crate's directory).
            .arg(format!("-fdebug-prefix-map={}=ebpf", src_dir.display()))
            .arg(format!(
                "-fdebug-prefix-map={}=crates/nodemedic-probe",
                manifest.display()
            ))
            .arg("-I")
            .arg(&src_dir);
        if let Some(dir) = &include {
            cmd.arg("-I").arg(dir);
        }
        cmd.arg("-c").arg(&src).arg("-o").arg(&obj);
        match cmd.status() {
            Ok(s) if s.success() => {}
            Ok(s) => fail(&format!("{clang} failed on {} ({s})", src.display())),
            Err(e) => fail(&format!("cannot run {clang}: {e}")),
        }
    }
    for entry in ["perf_wakeup.bpf.c", "perf_wakeup.h", "nodemedic_vmlinux.h"] {
        println!("cargo:rerun-if-changed={}", src_dir.join(entry).display());
    }
}
