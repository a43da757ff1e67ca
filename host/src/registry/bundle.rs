//! Compressed policy files: bundles, several components in one `*.tar.zst` file of the policy directory, so that
//! the default set fits one ConfigMap; and single compressed components, `NAME.wasm.zst`.
//!
//! The components share most of their bytes (std, serde, the contract's glue): compressed one by one they keep
//! ~32% of their size, but a zstd window that spans the whole archive finds what they share, and 31 components of
//! 8.2 MB become a bundle of 436 KiB. A bundle is a plain tar of `NAME.wasm` files compressed with zstd:
//! `wasp configmap --bundle` makes one, and so does `tar -c *.wasm | zstd -19 --long=27`. A bundle may carry each
//! component's signature as `NAME.wasm.sig` (see [`super::signature`]). A single compressed component is what `zstd -19 NAME.wasm` (or `wasp policy build`) writes: for a policy of one's own next to the
//! bundle, or in a ConfigMap of its own, at a third of the size.
//!
//! Unpacking is bounded (entries, each entry's size, the total, the decoder's window), so a compressed file cannot
//! make the host read or allocate more than a directory of loose files could.

use super::signature::{MAX_SIGNATURE_BYTES, SIGNATURE_SUFFIX};
use super::source::MAX_POLICY_BYTES;
use std::io::Read;

/// The file name ending that marks a bundle in the policy directory.
pub const BUNDLE_SUFFIX: &str = ".tar.zst";
/// More components than any policy set has.
const MAX_ENTRIES: usize = 256;
/// All entries together, unpacked.
const MAX_UNPACKED_BYTES: u64 = 256 << 20;
/// The largest zstd window a bundle may use (`zstd --long=27`): the decoder allocates at most this much, and less
/// when the frame says its size, as bundles made by `pack` do.
const MAX_WINDOW_LOG: u32 = 27;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// The window `pack` uses: wide enough to span the whole default set.
const PACK_WINDOW_LOG: u32 = 24;

/// The file name ending of a single compressed component.
pub const COMPRESSED_SUFFIX: &str = ".wasm.zst";
/// What `zstd -19` does; higher levels gain nothing on components (measured: 97623 and 97609 bytes).
const LEVEL: i32 = 19;

/// A zstd decoder with the window bounded, or why `bytes` are not zstd (`what` says what they should be).
fn decoder<'a>(bytes: &'a [u8], what: &str) -> Result<zstd::stream::read::Decoder<'static, std::io::BufReader<&'a [u8]>>, String> {
    if !bytes.starts_with(&ZSTD_MAGIC) {
        return Err(format!("not zstd: {what}"));
    }
    let mut decoder = zstd::stream::read::Decoder::new(bytes).map_err(|error| format!("not zstd: {error}"))?;
    decoder.window_log_max(MAX_WINDOW_LOG).map_err(|error| error.to_string())?;
    Ok(decoder)
}

/// The component in a `NAME.wasm.zst` file, or why it is not one.
pub fn decompress(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let decoder = decoder(bytes, "a NAME.wasm.zst file is one component compressed with zstd")?;
    let mut component = Vec::new();
    decoder.take(MAX_POLICY_BYTES + 1).read_to_end(&mut component).map_err(|error| format!("damaged: {error}"))?;
    if component.len() as u64 > MAX_POLICY_BYTES {
        return Err(format!("unpacks to more than the {MAX_POLICY_BYTES} bytes a policy may have"));
    }
    Ok(component)
}

/// A `NAME.wasm.zst` file's bytes, as [`decompress`] reads them.
pub fn compress(component: &[u8]) -> anyhow::Result<Vec<u8>> {
    Ok(zstd::bulk::compress(component, LEVEL)?)
}

/// A component file's bytes, uncompressed when it is a `NAME.wasm.zst` (what the CLI's commands take).
pub fn read_component(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if path.to_string_lossy().ends_with(COMPRESSED_SUFFIX) {
        return decompress(&bytes).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()));
    }
    Ok(bytes)
}

/// The `(file name, bytes)` of each component (`NAME.wasm`) and signature (`NAME.wasm.sig`) in a bundle, or why
/// it is not one.
pub fn unpack(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let decoder = decoder(bytes, "a bundle is a tar of NAME.wasm files compressed with zstd")?;
    let mut archive = tar::Archive::new(decoder.take(MAX_UNPACKED_BYTES + 1));
    let mut components = Vec::new();
    let mut total = 0u64;
    let entries = archive.entries().map_err(|error| format!("not a tar archive: {error}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|error| unpack_error(total, error))?;
        let path = entry.path().map_err(|error| error.to_string())?.to_string_lossy().trim_start_matches("./").to_string();
        let kind = entry.header().entry_type();
        if kind.is_dir() && (path.is_empty() || path == ".") {
            continue;
        }
        let signature = path.ends_with(SIGNATURE_SUFFIX);
        if !kind.is_file() || path.contains('/') || !(path.ends_with(".wasm") || signature) {
            return Err(format!("entry {path:?}: a bundle holds only NAME.wasm files and their NAME.wasm.sig signatures at its top level"));
        }
        let size = entry.size();
        if size > MAX_POLICY_BYTES {
            return Err(format!("entry {path}: {size} bytes is more than the {MAX_POLICY_BYTES} a policy may have"));
        }
        if signature && size > MAX_SIGNATURE_BYTES {
            return Err(format!("entry {path}: {size} bytes is more than the {MAX_SIGNATURE_BYTES} a signature may have"));
        }
        if components.len() == MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
        let mut component = Vec::with_capacity(size as usize);
        entry.read_to_end(&mut component).map_err(|error| unpack_error(total, error))?;
        total += size;
        components.push((path, component));
    }
    Ok(components)
}

fn unpack_error(read: u64, error: std::io::Error) -> String {
    if read >= MAX_UNPACKED_BYTES {
        format!("unpacks to more than {MAX_UNPACKED_BYTES} bytes")
    } else {
        format!("damaged: {error}")
    }
}

/// A bundle of `(file name, bytes)` components, reproducible (no times, owners or modes of the machine).
pub fn pack(components: &[(String, Vec<u8>)]) -> anyhow::Result<Vec<u8>> {
    let mut archive = tar::Builder::new(Vec::new());
    for (name, bytes) in components {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        archive.append_data(&mut header, name, bytes.as_slice())?;
    }
    let tar = archive.into_inner()?;
    let mut compressor = zstd::bulk::Compressor::new(LEVEL)?;
    compressor.set_parameter(zstd::zstd_safe::CParameter::WindowLog(PACK_WINDOW_LOG))?;
    compressor.set_parameter(zstd::zstd_safe::CParameter::EnableLongDistanceMatching(true))?;
    Ok(compressor.compress(&tar)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, &[u8], tar::EntryType)]) -> Vec<u8> {
        let mut archive = tar::Builder::new(Vec::new());
        for (name, bytes, kind) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(bytes.len() as u64);
            header.set_cksum();
            archive.append_data(&mut header, name, *bytes).unwrap();
        }
        archive.into_inner().unwrap()
    }

    #[test]
    fn a_bundle_round_trips_and_shared_bytes_compress_across_components() {
        // Two "components" that share 200 KB of pseudo-random bytes, as policies share their runtime.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let shared: Vec<u8> = (0..200_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let a = [b"a".as_slice(), &shared].concat();
        let b = [b"b".as_slice(), &shared].concat();
        let components = vec![("a.wasm".to_string(), a), ("b.wasm".to_string(), b)];
        let bundle = pack(&components).unwrap();
        assert!(bundle.len() < 220_000, "the second copy costs almost nothing: {} bytes", bundle.len());
        assert_eq!(unpack(&bundle).unwrap(), components);
    }

    #[test]
    fn only_top_level_components_and_bounded_sizes_are_accepted() {
        let compress = |tar: Vec<u8>| zstd::bulk::compress(&tar, 3).unwrap();
        let nested = compress(tar_of(&[("dir/a.wasm", b"x", tar::EntryType::Regular)]));
        assert_eq!(
            unpack(&nested).unwrap_err(),
            r#"entry "dir/a.wasm": a bundle holds only NAME.wasm files and their NAME.wasm.sig signatures at its top level"#
        );
        let other = compress(tar_of(&[("notes.txt", b"x", tar::EntryType::Regular)]));
        assert!(unpack(&other).unwrap_err().starts_with(r#"entry "notes.txt""#));
        let link = compress(tar_of(&[("a.wasm", b"", tar::EntryType::Symlink)]));
        assert!(unpack(&link).unwrap_err().starts_with(r#"entry "a.wasm""#));
        // A bomb: one entry whose header says more than a policy may have.
        let huge = compress(tar_of(&[("big.wasm", &vec![0u8; MAX_POLICY_BYTES as usize + 1], tar::EntryType::Regular)]));
        assert!(huge.len() < 100_000);
        assert!(unpack(&huge).unwrap_err().contains("is more than the 16777216 a policy may have"));
        let garbage = unpack(b"not zstd at all").unwrap_err();
        assert!(garbage.starts_with("not zstd"), "{garbage}");
    }

    #[test]
    fn a_compressed_component_round_trips_and_its_size_is_bounded() {
        let component = b"\0asm a component, compressed".repeat(100);
        let compressed = compress(&component).unwrap();
        assert!(compressed.len() < component.len() / 10, "{} bytes", compressed.len());
        assert_eq!(decompress(&compressed).unwrap(), component);
        let bomb = zstd::bulk::compress(&vec![0u8; MAX_POLICY_BYTES as usize + 1], 3).unwrap();
        assert_eq!(decompress(&bomb).unwrap_err(), "unpacks to more than the 16777216 bytes a policy may have");
        assert_eq!(decompress(b"\0asm").unwrap_err(), "not zstd: a NAME.wasm.zst file is one component compressed with zstd");
        let truncated = decompress(&compressed[..compressed.len() / 2]).unwrap_err();
        assert!(truncated.starts_with("damaged: "), "{truncated}");
    }
}
