//! Info hints of a file, under the names ROMIO users know: `cb_nodes`, `cb_buffer_size`,
//! `romio_cb_read` / `romio_cb_write` (`enable` / `disable` / `automatic`),
//! `romio_ds_read` / `romio_ds_write`, `ind_rd_buffer_size`, `ind_wr_buffer_size`,
//! `striping_unit` (the alignment of the aggregators' file domains), and Tsunagi's own
//! `tsunagi_cb_piece_limit` (automatic collective buffering runs only for accesses whose
//! pieces are on average smaller than this) and `tsunagi_cb_read_small` (automatic
//! collective reads go straight to the file when every rank's view holds at most this
//! many bytes per filetype tile; 0 turns it off), `tsunagi_cb_shm` (`disable`: two-phase
//! I/O on one node moves the data by messages instead of through shared memory) and
//! `tsunagi_cb_mmap` (two-phase I/O on one node through the file's own pages: `automatic`
//! on local file systems for dense reads and dense writes of spans up to 128 MiB, `enable` on any file
//! system that allows it, `disable` never).
//! Unknown keys are ignored (MPI says hints may be); malformed values of known keys too.

/// The default of `tsunagi_cb_piece_limit` (bytes; see `docs/io.md` for the measurements
/// behind it).
pub const DEFAULT_CB_PIECE_LIMIT: usize = 16 << 10;

/// The default of `tsunagi_cb_read_small` (bytes of one rank's filetype tile; see
/// `docs/io.md`).
pub const DEFAULT_CB_READ_SMALL: usize = 4 << 20;

/// Whether an optimisation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    Enable,
    Disable,
    /// Decided per access (collective buffering: when the ranks' accesses interleave in
    /// small pieces; data sieving: when one access has several pieces close together).
    Automatic,
}

impl Switch {
    fn parse(v: &str) -> Option<Switch> {
        match v.trim().to_ascii_lowercase().as_str() {
            "enable" | "true" => Some(Switch::Enable),
            "disable" | "false" => Some(Switch::Disable),
            "automatic" => Some(Switch::Automatic),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Switch::Enable => "enable",
            Switch::Disable => "disable",
            Switch::Automatic => "automatic",
        }
    }
}

/// The hints in effect for a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hints {
    /// Aggregators of two-phase I/O (default: one per node of the communicator; unless
    /// the program set it, a collective access with much data uses more, see
    /// [`crate::twophase::default_aggregators`]).
    pub cb_nodes: usize,
    /// Whether the program gave `cb_nodes`.
    pub cb_nodes_set: bool,
    /// File domains of two-phase I/O start on multiples of this (when they are at least
    /// this large).
    pub striping_unit: usize,
    /// Bytes an aggregator handles per round.
    pub cb_buffer_size: usize,
    pub cb_read: Switch,
    pub cb_write: Switch,
    /// Automatic collective buffering needs the ranks' pieces to be smaller than this on
    /// average: larger pieces go straight to the file (one request each costs less than
    /// moving their bytes through an aggregator).
    pub cb_piece_limit: usize,
    /// Automatic collective reads go straight to the file, with no synchronisation, when
    /// every rank's filetype tile holds at most this many bytes (and its pieces are not
    /// tiny): the two synchronisations of two-phase I/O cost more than such a read.
    /// 0: never.
    pub cb_read_small: usize,
    /// Two-phase I/O of a file whose ranks all run on one node goes through shared memory
    /// (module `shm`) unless this is `disable`.
    pub cb_shm: Switch,
    /// Two-phase I/O of a file whose ranks all run on one node goes through the file's
    /// own pages, mapped by every rank (module `mapped`): `automatic` when the file system
    /// is local and the access dense (a write at most 128 MiB wide), `enable` whenever the file
    /// can be mapped.
    pub cb_mmap: Switch,
    pub ds_read: Switch,
    pub ds_write: Switch,
    /// Largest span one sieving read covers.
    pub ind_rd_buffer_size: usize,
    /// Largest span one sieving read-modify-write covers.
    pub ind_wr_buffer_size: usize,
}

impl Hints {
    /// The defaults for a communicator of `size` ranks on `nodes` nodes (ROMIO's).
    pub fn defaults(size: usize, nodes: usize) -> Hints {
        Hints {
            cb_nodes: nodes.clamp(1, size.max(1)),
            cb_nodes_set: false,
            striping_unit: 1 << 20,
            cb_buffer_size: 16 << 20,
            cb_read: Switch::Automatic,
            cb_write: Switch::Automatic,
            cb_piece_limit: DEFAULT_CB_PIECE_LIMIT,
            cb_read_small: DEFAULT_CB_READ_SMALL,
            cb_shm: Switch::Automatic,
            cb_mmap: Switch::Automatic,
            ds_read: Switch::Automatic,
            ds_write: Switch::Automatic,
            ind_rd_buffer_size: 4 << 20,
            ind_wr_buffer_size: 512 << 10,
        }
    }

    /// Apply the known keys of `info`; `size` bounds `cb_nodes`.
    pub fn apply(&mut self, info: &[(String, String)], size: usize) {
        let bytes = |v: &str| v.trim().parse::<usize>().ok().filter(|&n| n > 0);
        for (k, v) in info {
            match k.as_str() {
                "cb_nodes" => {
                    if let Some(n) = bytes(v) {
                        self.cb_nodes = n.min(size.max(1));
                        self.cb_nodes_set = true;
                    }
                }
                "cb_buffer_size" => {
                    if let Some(n) = bytes(v) {
                        self.cb_buffer_size = n;
                    }
                }
                "tsunagi_cb_piece_limit" => {
                    if let Some(n) = bytes(v) {
                        self.cb_piece_limit = n;
                    }
                }
                "tsunagi_cb_read_small" => {
                    if let Ok(n) = v.trim().parse::<usize>() {
                        self.cb_read_small = n;
                    }
                }
                "striping_unit" => {
                    if let Some(n) = bytes(v) {
                        self.striping_unit = n;
                    }
                }
                "ind_rd_buffer_size" => {
                    if let Some(n) = bytes(v) {
                        self.ind_rd_buffer_size = n;
                    }
                }
                "ind_wr_buffer_size" => {
                    if let Some(n) = bytes(v) {
                        self.ind_wr_buffer_size = n;
                    }
                }
                "romio_cb_read" => self.cb_read = Switch::parse(v).unwrap_or(self.cb_read),
                "romio_cb_write" => self.cb_write = Switch::parse(v).unwrap_or(self.cb_write),
                "tsunagi_cb_shm" => self.cb_shm = Switch::parse(v).unwrap_or(self.cb_shm),
                "tsunagi_cb_mmap" => self.cb_mmap = Switch::parse(v).unwrap_or(self.cb_mmap),
                "romio_ds_read" => self.ds_read = Switch::parse(v).unwrap_or(self.ds_read),
                "romio_ds_write" => self.ds_write = Switch::parse(v).unwrap_or(self.ds_write),
                _ => {}
            }
        }
    }

    /// The hints as MPI_File_get_info reports them.
    pub fn to_info(&self) -> Vec<(String, String)> {
        vec![
            ("cb_nodes".into(), self.cb_nodes.to_string()),
            ("cb_buffer_size".into(), self.cb_buffer_size.to_string()),
            ("striping_unit".into(), self.striping_unit.to_string()),
            ("romio_cb_read".into(), self.cb_read.name().into()),
            ("romio_cb_write".into(), self.cb_write.name().into()),
            (
                "tsunagi_cb_piece_limit".into(),
                self.cb_piece_limit.to_string(),
            ),
            (
                "tsunagi_cb_read_small".into(),
                self.cb_read_small.to_string(),
            ),
            ("tsunagi_cb_shm".into(), self.cb_shm.name().into()),
            ("tsunagi_cb_mmap".into(), self.cb_mmap.name().into()),
            ("romio_ds_read".into(), self.ds_read.name().into()),
            ("romio_ds_write".into(), self.ds_write.name().into()),
            (
                "ind_rd_buffer_size".into(),
                self.ind_rd_buffer_size.to_string(),
            ),
            (
                "ind_wr_buffer_size".into(),
                self.ind_wr_buffer_size.to_string(),
            ),
        ]
    }
}

/// `key=value,key=value` (TSUNAGI_IO_HINTS) as info pairs; malformed items are skipped.
pub fn parse_list(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_apply_and_bad_values_are_ignored() {
        let mut h = Hints::defaults(4, 2);
        assert_eq!(h.cb_nodes, 2);
        assert!(!h.cb_nodes_set);
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        h.apply(
            &[
                kv("cb_nodes", "9"),
                kv("cb_buffer_size", "4096"),
                kv("romio_cb_write", "disable"),
                kv("romio_ds_read", "bogus"),
                kv("striping_factor", "4"),
                kv("tsunagi_cb_piece_limit", "100"),
                kv("tsunagi_cb_read_small", "0"),
                kv("tsunagi_cb_shm", "disable"),
                kv("tsunagi_cb_mmap", "enable"),
            ],
            4,
        );
        assert_eq!(h.cb_nodes, 4, "bounded by the communicator");
        assert!(h.cb_nodes_set);
        assert_eq!(h.cb_buffer_size, 4096);
        assert_eq!(h.cb_write, Switch::Disable);
        assert_eq!(h.ds_read, Switch::Automatic);
        assert_eq!(h.cb_piece_limit, 100);
        assert_eq!(h.cb_read_small, 0, "0 turns the small-read route off");
        assert_eq!(h.cb_shm, Switch::Disable);
        assert_eq!(h.cb_mmap, Switch::Enable);
        assert_eq!(
            parse_list("cb_nodes=4, romio_cb_write = disable,junk"),
            vec![kv("cb_nodes", "4"), kv("romio_cb_write", "disable")]
        );
        let info = h.to_info();
        assert!(info.contains(&kv("romio_cb_write", "disable")));
        assert!(info.contains(&kv("cb_buffer_size", "4096")));
    }
}
