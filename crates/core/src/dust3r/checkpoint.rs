//! The public DUSt3R checkpoints. One is configured (`dust3r_model`); it names the Hub repository
//! the weights come from, and weights found elsewhere must be the same checkpoint.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use super::config::{Dust3rConfig, HeadKind};
use super::Dust3rError;
use crate::weights::HubModel;

/// A published DUSt3R checkpoint: ViT-L encoder, ViT-B decoder, and a head at a training size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    /// `DUSt3R_ViTLarge_BaseDecoder_512_dpt`: 512-pixel input, DPT heads (the tt-model server's).
    #[default]
    Dpt512,
    /// `DUSt3R_ViTLarge_BaseDecoder_512_linear`: 512-pixel input, linear heads.
    Linear512,
    /// `DUSt3R_ViTLarge_BaseDecoder_224_linear`: 224x224 input, linear heads (196 tokens
    /// a view against 1024 at 512x512).
    Linear224,
}

/// The files a checkpoint folder holds.
const FILES: &[&str] = &["model.safetensors", "config.json"];
/// Names a folder holding any of the checkpoints (the configured one is checked on load).
const ENV_VAR: &str = "SP_DUST3R_DUST3R_WEIGHTS";

impl Checkpoint {
    /// Every checkpoint, in the order the parameter's description lists them.
    pub const ALL: [Checkpoint; 3] = [Checkpoint::Dpt512, Checkpoint::Linear512, Checkpoint::Linear224];

    /// Their names, in the same order.
    pub const NAMES: [&'static str; 3] = ["512_dpt", "512_linear", "224_linear"];

    /// The short name users give (`512_dpt`, `512_linear`, `224_linear`).
    pub fn name(self) -> &'static str {
        match self {
            Checkpoint::Dpt512 => "512_dpt",
            Checkpoint::Linear512 => "512_linear",
            Checkpoint::Linear224 => "224_linear",
        }
    }

    /// Where the weights are published. 512_dpt and 224_linear are pinned to a commit;
    /// 512_linear follows `main` (its weights have not changed since they were pushed).
    pub fn hub_model(self) -> HubModel {
        let (repo, revision) = match self {
            Checkpoint::Dpt512 => {
                ("naver/DUSt3R_ViTLarge_BaseDecoder_512_dpt", "61c57447d7b0adc8a1a30b2b0adec7a8935aa2a3")
            }
            Checkpoint::Linear512 => ("naver/DUSt3R_ViTLarge_BaseDecoder_512_linear", "main"),
            Checkpoint::Linear224 => {
                ("naver/DUSt3R_ViTLarge_BaseDecoder_224_linear", "597e507faeac944ceabcc6797700a7f91b48ade5")
            }
        };
        HubModel { name: "DUSt3R", repo, revision, env_var: ENV_VAR, files: FILES }
    }

    /// The head this checkpoint has.
    pub fn head(self) -> HeadKind {
        match self {
            Checkpoint::Dpt512 => HeadKind::Dpt,
            Checkpoint::Linear512 | Checkpoint::Linear224 => HeadKind::Linear,
        }
    }

    /// The network input's side.
    pub fn input_size(self) -> u32 {
        match self {
            Checkpoint::Linear224 => 224,
            Checkpoint::Dpt512 | Checkpoint::Linear512 => 512,
        }
    }

    /// The checkpoint a config describes (its head and input side), if it is one of these.
    pub fn of(config: &Dust3rConfig) -> Option<Self> {
        Self::ALL.into_iter().find(|c| Some(c.head()) == config.head() && c.input_size() == config.input_size())
    }
}

impl Checkpoint {
    /// Checks, from its config.json alone (before gigabytes of weights load), that `dir` holds
    /// this checkpoint. A geometry of none of the published ones (a test model) passes, logged.
    pub fn confirm(self, dir: &Path) -> Result<(), Dust3rError> {
        let held = Dust3rConfig::from_file(&dir.join("config.json"))?;
        match Self::of(&held) {
            Some(found) if found != self => {
                Err(Dust3rError::WrongCheckpoint { dir: dir.to_path_buf(), found, configured: self })
            }
            Some(_) => Ok(()),
            None => {
                tracing::info!(
                    "{}: a DUSt3R of its own geometry ({} head, {} pixels), none of the published checkpoints",
                    dir.display(),
                    held.head_type,
                    held.input_size()
                );
                Ok(())
            }
        }
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of the checkpoints.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("unknown DUSt3R checkpoint {0:?}: expected 512_dpt, 512_linear or 224_linear")]
pub struct UnknownCheckpoint(pub String);

impl FromStr for Checkpoint {
    type Err = UnknownCheckpoint;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| UnknownCheckpoint(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_configs_name_their_checkpoint() {
        for c in Checkpoint::ALL {
            assert_eq!(c.name().parse::<Checkpoint>(), Ok(c));
            assert!(Checkpoint::NAMES.contains(&c.name()));
            assert!(c.hub_model().repo.ends_with(c.name()), "{}", c.hub_model().repo);
        }
        assert!("512".parse::<Checkpoint>().unwrap_err().to_string().contains("224_linear"));
        let config = |head: &str, size: &str| {
            Dust3rConfig::from_json(&format!(
                r#"{{"head_type": "{head}", "img_size": {size}, "enc_embed_dim": 64, "enc_depth": 1,
                    "enc_num_heads": 2, "dec_embed_dim": 64, "dec_depth": 4, "dec_num_heads": 2}}"#
            ))
            .unwrap()
        };
        assert_eq!(Checkpoint::of(&config("linear", "[224, 224]")), Some(Checkpoint::Linear224));
        assert_eq!(Checkpoint::of(&config("linear", "[512, 512]")), Some(Checkpoint::Linear512));
        assert_eq!(Checkpoint::of(&config("dpt", "[512, 512]")), Some(Checkpoint::Dpt512));
        assert_eq!(Checkpoint::of(&config("dpt", "null")), Some(Checkpoint::Dpt512));
        assert_eq!(Checkpoint::of(&config("dpt", "[224, 224]")), None);
        assert_eq!(config("linear", "[224, 224]").input_size(), 224);
    }
}
