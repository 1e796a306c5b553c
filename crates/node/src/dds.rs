//! Our message types on ros2-client's endpoints. ros2-client asks its samples to implement its
//! marker trait `Message`; the messages are the core's, which knows no DDS, so they travel in a
//! transparent wrapper: the same serde shape, hence the same CDR bytes.

use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// A message as a ros2-client publisher sends it or a subscription takes it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Dds<T>(pub T);

impl<T: Serialize + DeserializeOwned> ros2_client::Message for Dds<T> {}
